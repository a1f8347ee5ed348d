{{/*
The APIServices registering the adapter with the aggregation layer, and the
check that the chart takes none from another owner.

A cluster holds one APIService of each name (v1beta1.external.metrics.k8s.io
is KEDA's where KEDA runs, v1beta1.custom.metrics.k8s.io prometheus-adapter's),
so registering one replaces whoever served it. The chart looks each up
(Helm's lookup: `helm install`, `helm upgrade` and `--dry-run=server`; never
`helm template`) and fails, naming the owner and the values that decide,
rather than break the owner's HPAs and ScaledObjects silently.
*/}}

{{/* Every APIService the chart knows, in the order rendered; the priority
makes v1beta2 the custom group's preferred version. */}}
{{- define "gpuscale.apiService.all" -}}
{{- toJson (list
  (dict "key" "custom" "group" "custom.metrics.k8s.io" "version" "v1beta2" "priority" 200)
  (dict "key" "custom" "group" "custom.metrics.k8s.io" "version" "v1beta1" "priority" 100)
  (dict "key" "external" "group" "external.metrics.k8s.io" "version" "v1beta1" "priority" 100)) }}
{{- end }}

{{/* "true" when the values register the APIService (dict key, version). */}}
{{- define "gpuscale.apiService.enabled" -}}
{{- $ctx := index . 0 }}{{ $v := index . 1 }}
{{- if index (index $ctx.Values.apiService $v.key) $v.version }}true{{ end }}
{{- end }}

{{/* "true" when the values allow replacing another owner's APIService. */}}
{{- define "gpuscale.apiService.takeOver" -}}
{{- $ctx := index . 0 }}{{ $v := index . 1 }}
{{- if index (index $ctx.Values.apiService.takeOver $v.key) $v.version }}true{{ end }}
{{- end }}

{{/* "true" when an existing APIService is this release's: Helm's release
annotations name it, or it already routes to this release's adapter
Service (the plain manifests, applied before the chart). */}}
{{- define "gpuscale.apiService.ours" -}}
{{- $ctx := index . 0 }}{{ $obj := index . 1 }}
{{- $ann := $obj.metadata.annotations | default dict }}
{{- $svc := $obj.spec.service | default dict }}
{{- if and (eq (toString (get $ann "meta.helm.sh/release-name")) $ctx.Release.Name) (eq (toString (get $ann "meta.helm.sh/release-namespace")) $ctx.Release.Namespace) }}true
{{- else if and (eq (toString (get $svc "namespace")) (include "gpuscale.namespace" $ctx)) (eq (toString (get $svc "name")) (include "gpuscale.adapter.fullname" $ctx)) }}true
{{- end }}
{{- end }}

{{/* Who an existing APIService belongs to, in words: the Service it routes
to, its app.kubernetes.io/* and Helm labels, and its Helm release. */}}
{{- define "gpuscale.apiService.owner" -}}
{{- $svc := .spec.service | default dict }}
{{- if $svc.name }}the Service {{ $svc.namespace }}/{{ $svc.name }}
{{- else }}the kube-apiserver itself (no spec.service)
{{- end }}
{{- $labels := list }}
{{- range $k, $val := .metadata.labels | default dict }}
{{- if or (hasPrefix "app.kubernetes.io/" $k) (has $k (list "helm.sh/chart" "app" "chart" "release" "heritage")) }}
{{- $labels = append $labels (printf "%s=%s" $k $val) }}
{{- end }}
{{- end }}
{{- with $labels }} (labels {{ join ", " . }}){{ end }}
{{- $ann := .metadata.annotations | default dict }}
{{- with get $ann "meta.helm.sh/release-name" }}, Helm release {{ get $ann "meta.helm.sh/release-namespace" }}/{{ . }}{{ end }}
{{- end }}

{{/* Fails when the values would replace an APIService another owner
holds, listing every such APIService. A version the chart does not
register conflicts too when the chart registers another version of its
group: the group's preferred version (v1beta2 for custom) is the one the
HPA controller asks, so registering it alone takes the whole group. And
takeOver works on install only: `helm upgrade --take-ownership` adopts an
existing object without rewriting it (Helm 3.22: a two-way merge of the
rendered object with itself), which would leave it routing to its owner. */}}
{{- define "gpuscale.apiService.checkOwners" -}}
{{- $ctx := . }}
{{- $all := include "gpuscale.apiService.all" . | fromJsonArray }}
{{- $groups := dict }}
{{- range $all }}
{{- if include "gpuscale.apiService.enabled" (list $ctx .) }}{{ $_ := set $groups .group "true" }}{{ end }}
{{- end }}
{{- $conflicts := list }}
{{- range $all }}
{{- $name := printf "%s.%s" .version .group }}
{{- $current := lookup "apiregistration.k8s.io/v1" "APIService" "" $name }}
{{- if and $current (not (include "gpuscale.apiService.ours" (list $ctx $current))) }}
{{- $owner := include "gpuscale.apiService.owner" $current }}
{{- $off := printf "apiService.%s.%s=false" .key .version }}
{{- $take := printf "apiService.takeOver.%s.%s=true" .key .version }}
{{- if include "gpuscale.apiService.enabled" (list $ctx .) }}
{{- if not (include "gpuscale.apiService.takeOver" (list $ctx .)) }}
{{- $conflicts = append $conflicts (printf "APIService %s belongs to %s: registering gpuscale's would send every request for %s %s to gpuscale instead. To leave it to its owner, set %s; to replace it, set %s and pass --take-ownership to helm install, with --force-conflicts on Helm 4 (Helm adopts no object it did not create otherwise, and Helm 4's server-side apply leaves the owner's fields to it)." $name $owner .group .version $off $take) }}
{{- else if $ctx.Release.IsUpgrade }}
{{- $conflicts = append $conflicts (printf "APIService %s belongs to %s, and %s cannot take it over on helm upgrade: Helm adopts an existing object on upgrade without rewriting it (even with --take-ownership), so it would keep routing to its owner. To replace it, delete it (kubectl delete apiservice %s) and upgrade again; to leave it to its owner, set %s." $name $owner $take $name $off) }}
{{- end }}
{{- else if and (hasKey $groups .group) (not (include "gpuscale.apiService.takeOver" (list $ctx .))) }}
{{- $group := .group }}
{{- $others := list }}
{{- range $all }}{{ if and (eq .group $group) (include "gpuscale.apiService.enabled" (list $ctx .)) }}{{ $others = append $others (printf "apiService.%s.%s=false" .key .version) }}{{ end }}{{ end }}
{{- $conflicts = append $conflicts (printf "APIService %s belongs to %s: gpuscale does not register it (%s), but registering another version of %s beside it would change the group's preferred version, which the HPA controller asks for every metric of the group. To leave %s to its owner, set %s; to replace it, set apiService.%s.%s=true and %s and pass --take-ownership to helm install, with --force-conflicts on Helm 4." $name $owner $off .group .group (join " and " $others) .key .version $take) }}
{{- end }}
{{- end }}
{{- end }}
{{- with $conflicts }}
{{- fail (printf "\n%s\nSee docs/coexistence.md." (join "\n" .)) }}
{{- end }}
{{- end }}

{{/* One APIService object; dict ctx, v (an entry of gpuscale.apiService.all). */}}
{{- define "gpuscale.apiService.object" -}}
{{- $ := .ctx }}{{ $v := .v -}}
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: {{ $v.version }}.{{ $v.group }}
  labels:
    {{- include "gpuscale.adapter.labels" $ | nindent 4 }}
  {{- $annotations := deepCopy $.Values.apiService.annotations }}
  {{- if eq (include "gpuscale.adapter.tlsSource" $) "certManager" }}
  {{- $_ := set $annotations "cert-manager.io/inject-ca-from" (printf "%s/%s" (include "gpuscale.namespace" $) (include "gpuscale.adapter.tlsSecretName" $)) }}
  {{- end }}
  {{- with $annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  service:
    name: {{ include "gpuscale.adapter.fullname" $ }}
    namespace: {{ include "gpuscale.namespace" $ }}
    port: {{ $.Values.adapter.service.port }}
  group: {{ $v.group }}
  version: {{ $v.version }}
  {{- with include "gpuscale.apiService.tls" $ }}
  {{- . | trim | nindent 2 }}
  {{- end }}
  groupPriorityMinimum: {{ $.Values.apiService.groupPriorityMinimum }}
  versionPriority: {{ $v.priority }}
{{- end }}

{{/* The APIServices of one group the values register, as YAML documents;
dict ctx, key (custom or external). */}}
{{- define "gpuscale.apiService.group" -}}
{{- $ctx := .ctx }}{{ $key := .key }}
{{- $n := 0 }}
{{- range include "gpuscale.apiService.all" $ctx | fromJsonArray }}
{{- if and (eq .key $key) (include "gpuscale.apiService.enabled" (list $ctx .)) }}
{{- if $n }}
---
{{- end }}
{{- $n = add1 $n }}
{{ include "gpuscale.apiService.object" (dict "ctx" $ctx "v" .) }}
{{- end }}
{{- end }}
{{- end }}
