{{/* The namespace of every namespaced object: namespaceOverride, else the release's. */}}
{{- define "gpuscale.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Object names: <fullname>-adapter, <fullname>-exporter. */}}
{{- define "gpuscale.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gpuscale.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gpuscale.adapter.fullname" -}}
{{- printf "%s-adapter" (include "gpuscale.fullname" .) }}
{{- end }}

{{- define "gpuscale.exporter.fullname" -}}
{{- printf "%s-exporter" (include "gpuscale.fullname" .) }}
{{- end }}

{{- define "gpuscale.adapter.serviceAccountName" -}}
{{- default (include "gpuscale.adapter.fullname" .) .Values.adapter.serviceAccount.name }}
{{- end }}

{{- define "gpuscale.exporter.serviceAccountName" -}}
{{- default (include "gpuscale.exporter.fullname" .) .Values.exporter.serviceAccount.name }}
{{- end }}

{{/* Labels every object carries. */}}
{{- define "gpuscale.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/part-of: gpuscale
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Selector labels. The name label is the component's, fixed so that the
adapter's default --exporter-selector and existing scrape configs match.
*/}}
{{- define "gpuscale.adapter.selectorLabels" -}}
app.kubernetes.io/name: gpuscale-adapter
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gpuscale.exporter.selectorLabels" -}}
app.kubernetes.io/name: gpuscale-exporter
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gpuscale.adapter.labels" -}}
{{ include "gpuscale.labels" . }}
app.kubernetes.io/name: gpuscale-adapter
app.kubernetes.io/component: metrics-adapter
{{- end }}

{{- define "gpuscale.exporter.labels" -}}
{{ include "gpuscale.labels" . }}
app.kubernetes.io/name: gpuscale-exporter
app.kubernetes.io/component: gpu-exporter
{{- end }}

{{/*
An image reference from a component's image values: global.imageRegistry
(else image.registry), repository, and the digest when set (the tag, which
defaults to the chart's appVersion, is then kept for people only).
*/}}
{{- define "gpuscale.image" -}}
{{- $img := index . 0 }}{{ $ctx := index . 1 }}
{{- $registry := $ctx.Values.global.imageRegistry | default $img.registry }}
{{- $repo := ternary (printf "%s/%s" $registry $img.repository) $img.repository (ne $registry "") }}
{{- $tag := default $ctx.Chart.AppVersion $img.tag }}
{{- if $img.digest }}
{{- printf "%s:%s@%s" $repo $tag $img.digest }}
{{- else }}
{{- printf "%s:%s" $repo $tag }}
{{- end }}
{{- end }}

{{- define "gpuscale.adapter.image" -}}
{{- include "gpuscale.image" (list .Values.adapter.image .) }}
{{- end }}

{{- define "gpuscale.exporter.image" -}}
{{- include "gpuscale.image" (list .Values.exporter.image .) }}
{{- end }}

{{/*
A probe: the chart's default (dict), with the values' override merged
over it; `enabled: false` drops it. list default override.
*/}}
{{- define "gpuscale.probe" -}}
{{- $default := index . 0 }}{{ $override := index . 1 | default dict }}
{{- if ne (toString (get $override "enabled")) "false" }}
{{- toYaml (mergeOverwrite (deepCopy $default) (omit $override "enabled")) }}
{{- end }}
{{- end }}

{{/*
Whether to leave user and group IDs to the platform (OpenShift's restricted
SCC assigns them per namespace): global.compatibility.openshift.adaptSecurityContext
is force, or auto on a cluster that serves security.openshift.io/v1.
*/}}
{{- define "gpuscale.platformAssignsIDs" -}}
{{- $mode := .Values.global.compatibility.openshift.adaptSecurityContext }}
{{- if or (eq $mode "force") (and (eq $mode "auto") (.Capabilities.APIVersions.Has "security.openshift.io/v1")) }}true{{ end }}
{{- end }}

{{/* A security context without fixed IDs where the platform assigns them; list ctx securityContext. */}}
{{- define "gpuscale.securityContext" -}}
{{- $ctx := index . 0 }}{{ $sc := index . 1 }}
{{- if include "gpuscale.platformAssignsIDs" $ctx }}
{{- $sc = omit $sc "runAsUser" "runAsGroup" "fsGroup" }}
{{- end }}
{{- toYaml $sc }}
{{- end }}

{{/* The adapter's exporter selector: this release's exporter pods. */}}
{{- define "gpuscale.adapter.exporterSelector" -}}
{{- if .Values.adapter.config.exporterSelector }}
{{- .Values.adapter.config.exporterSelector }}
{{- else }}
{{- printf "app.kubernetes.io/name=gpuscale-exporter,app.kubernetes.io/instance=%s" .Release.Name }}
{{- end }}
{{- end }}

{{/* "true" when the exporters reserve a lane for this release's adapter:
both run, and the adapter reads this release's exporters. */}}
{{- define "gpuscale.exporter.reservedLane" -}}
{{- if and .Values.exporter.enabled .Values.exporter.reservedLane.enabled (not .Values.adapter.config.exporterSelector) }}true{{ end }}
{{- end }}

{{/* The Secret holding the exporters' reserved-lane token: the user's
(exporter.reservedLane.secretName) or the one the adapter makes at runtime. */}}
{{- define "gpuscale.exporter.tokenSecretName" -}}
{{- .Values.exporter.reservedLane.secretName | default (printf "%s-token" (include "gpuscale.exporter.fullname" .)) }}
{{- end }}

{{/* "true" when the adapter makes the token's Secret (--exporter-token-secret):
a lane, and no Secret of the user's. The chart renders no token, so that
two renders are the same bytes. */}}
{{- define "gpuscale.exporter.tokenSecretByAdapter" -}}
{{- if and (include "gpuscale.exporter.reservedLane" .) (not .Values.exporter.reservedLane.secretName) }}true{{ end }}
{{- end }}

{{/* The adapter's flags. */}}
{{- define "gpuscale.adapter.args" -}}
{{- $c := .Values.adapter.config -}}
- --secure-port={{ .Values.adapter.securePort }}
{{- $src := include "gpuscale.adapter.tlsSource" . }}
{{- if eq $src "selfSigned" }}
- --cert-dir=/tmp/certs
{{- else if eq $src "generate" }}
- --certs-secret={{ include "gpuscale.adapter.certsSecretName" . }}
- --certs-namespace={{ include "gpuscale.namespace" . }}
- --certs-service={{ include "gpuscale.adapter.fullname" . }}
{{- with include "gpuscale.apiService.registered" . }}
- --certs-apiservices={{ . }}
{{- end }}
- --cert-validity={{ .Values.adapter.tls.validity }}
- --ca-validity={{ .Values.adapter.tls.caValidity }}
{{- else }}
- --tls-cert-file=/etc/gpuscale/tls/tls.crt
- --tls-private-key-file=/etc/gpuscale/tls/tls.key
{{- end }}
{{- range $flag, $key := dict "scrape-interval" "scrapeInterval" "scrape-timeout" "scrapeTimeout" "max-staleness" "maxStaleness" "ttft-window" "ttftWindow" "latency-window-idle" "latencyWindowIdle" "capacity-ttft-objective" "capacityTTFTObjective" "capacity-itl-objective" "capacityITLObjective" }}
{{- with index $c $key }}
- --{{ $flag }}={{ . }}
{{- end }}
{{- end }}
{{- include "gpuscale.adapter.sourceArgs" . }}
{{- include "gpuscale.kedaScaler.args" . }}
- --exporter-selector={{ include "gpuscale.adapter.exporterSelector" . }}
- --exporter-namespace={{ $c.exporterNamespace | default (include "gpuscale.namespace" .) }}
- --exporter-daemonset={{ $c.exporterDaemonSet | default (include "gpuscale.exporter.fullname" .) }}
- --exporter-port={{ $c.exporterPort }}
- --exporter-path={{ $c.exporterPath }}
{{- if include "gpuscale.exporter.reservedLane" . }}
- --exporter-token-file=/etc/gpuscale/exporter-token/token
{{- if include "gpuscale.exporter.tokenSecretByAdapter" . }}
- --exporter-token-secret={{ include "gpuscale.namespace" . }}/{{ include "gpuscale.exporter.tokenSecretName" . }}
{{- end }}
{{- end }}
{{- if $c.scrapeHostNetwork }}
- --scrape-host-network
{{- end }}
- --max-targets-per-namespace={{ int $c.maxTargetsPerNamespace }}
{{- with $c.prometheusAnnotations }}
{{- if .enabled }}
- --scrape-prometheus-annotations
{{- with .namespaceSelector }}
- {{ printf "--prometheus-annotations-namespace-selector=%s" . | quote }}
{{- end }}
{{- else if .namespaceSelector }}
{{- fail "adapter.config.prometheusAnnotations.namespaceSelector is set but prometheusAnnotations.enabled is false: enable it, or clear the selector" }}
{{- end }}
{{- end }}
{{- with $c.logVerbosity }}
- --v={{ . }}
{{- end }}
{{- with $c.logFormat }}
- --logging-format={{ . }}
{{- end }}
{{- if .Values.scaleDown.enabled }}
- --scale-down-controller
- --leader-elect-resource-namespace={{ include "gpuscale.namespace" . }}
{{- range .Values.scaleDown.extraArgs }}
- {{ . }}
{{- end }}
{{- end }}
{{- include "gpuscale.adapter.federationArgs" . }}
{{- range .Values.adapter.extraArgs }}
- {{ . }}
{{- end }}
{{- end }}

{{/* --source and the PromQL source's flags. */}}
{{- define "gpuscale.adapter.sourceArgs" -}}
{{- $p := .Values.adapter.prometheus -}}
{{- if eq .Values.adapter.source "prometheus" }}
{{- if not $p.url }}
{{- fail "adapter.source=prometheus needs adapter.prometheus.url" }}
{{- end }}
- --source=prometheus
- {{ printf "--prometheus-url=%s" $p.url | quote }}
{{- with $p.timeout }}
- --prometheus-timeout={{ . }}
{{- end }}
{{- with $p.scrapeInterval }}
- --prometheus-scrape-interval={{ . }}
{{- end }}
{{- with $p.namesRefresh }}
- --prometheus-names-refresh={{ . }}
{{- end }}
{{- if include "gpuscale.adapter.promQueries" . }}
- --prometheus-queries=/etc/gpuscale/queries/queries.yaml
{{- end }}
{{- with $p.bearerTokenFile }}
- --prometheus-bearer-token-file={{ . }}
{{- end }}
{{- with $p.caFile }}
- --prometheus-ca-file={{ . }}
{{- end }}
{{- end }}
{{- end }}

{{/* The PromQL query overrides as YAML, empty unless the PromQL source has some. */}}
{{- define "gpuscale.adapter.promQueries" -}}
{{- if and (eq .Values.adapter.source "prometheus") .Values.adapter.prometheus.queries }}
{{- toYaml .Values.adapter.prometheus.queries }}
{{- end }}
{{- end }}

{{/*
Where the adapter's serving certificate comes from:
  secret       adapter.tls.secretName, made by the user; apiService.caBundle
               (or a CA injector) tells the aggregator the CA that signed it
  generate     the adapter makes a CA and a certificate at runtime, keeps
               them in the Secret <adapter>-certs, renews them before they
               expire and writes the CA bundle into its APIServices
               (--certs-secret); nothing random is rendered
  certManager  cert-manager issues <adapter>-tls from a CA of its own and
               injects that CA into the APIServices
  selfSigned   the adapter signs its own at start-up: nothing can verify it
*/}}
{{- define "gpuscale.adapter.tlsSource" -}}
{{- if .Values.adapter.tls.secretName }}secret
{{- else if has .Values.adapter.tls.source (list "generate" "certManager" "selfSigned") }}
{{- .Values.adapter.tls.source }}
{{- else }}
{{- fail (printf "adapter.tls.source is %q: use generate, certManager or selfSigned (or set adapter.tls.secretName)" .Values.adapter.tls.source) }}
{{- end }}
{{- end }}

{{- define "gpuscale.adapter.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "gpuscale.adapter.fullname" .)) .Values.adapter.tls.secretName }}
{{- end }}

{{/* The Secret the adapter keeps its runtime certificates in (generate). */}}
{{- define "gpuscale.adapter.certsSecretName" -}}
{{- printf "%s-certs" (include "gpuscale.adapter.fullname" .) }}
{{- end }}

{{/* The APIServices this release registers, comma-separated. */}}
{{- define "gpuscale.apiService.registered" -}}
{{- $names := list }}
{{- range include "gpuscale.apiService.all" . | fromJsonArray }}
{{- if include "gpuscale.apiService.enabled" (list $ .) }}{{ $names = append $names (printf "%s.%s" .version .group) }}{{ end }}
{{- end }}
{{- join "," $names }}
{{- end }}

{{/* APIService TLS settings: the aggregator verifies the adapter unless
insecureSkipTLSVerify is chosen. "false" is written out: an APIService taken
over from another adapter (prometheus-adapter's skips verification by
default) keeps every field the chart leaves unset, and the API refuses
insecureSkipTLSVerify beside a caBundle. With generate the caBundle is the
adapter's to write (and cert-manager's CA injector's with certManager): the
chart leaves it out, so that no render differs from the last and no GitOps
tool undoes the adapter's write. */}}
{{- define "gpuscale.apiService.tls" -}}
{{- $src := include "gpuscale.adapter.tlsSource" . -}}
{{- if .Values.apiService.caBundle }}
caBundle: {{ .Values.apiService.caBundle }}
insecureSkipTLSVerify: false
{{- else if and .Values.apiService.insecureSkipTLSVerify (ne $src "selfSigned") }}
{{- fail (printf "apiService.insecureSkipTLSVerify=true is only for adapter.tls.source=selfSigned; with %s the aggregator can verify the adapter" $src) }}
{{- else if .Values.apiService.insecureSkipTLSVerify }}
insecureSkipTLSVerify: true
{{- else if eq $src "selfSigned" }}
{{- fail "adapter.tls.source=selfSigned cannot be verified by the aggregator: also set apiService.insecureSkipTLSVerify=true to accept that, or use generate or certManager" }}
{{- else }}
insecureSkipTLSVerify: false
{{- end }}
{{- end }}

{{/* Whether the Prometheus Operator API is served. */}}
{{- define "gpuscale.monitoringAPI" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" }}true{{ end }}
{{- end }}

{{/* Federation's flags (--forward-to and friends; docs/federation.md). */}}
{{- define "gpuscale.adapter.federationArgs" -}}
{{- $f := .Values.federation -}}
{{- if $f.enabled }}
{{- if not $f.url }}
{{- fail "federation.enabled needs federation.url: the other metrics server's Service as https://NAME.NAMESPACE.svc:PORT" }}
{{- end }}
{{- if not $f.clientCertSecretName }}
{{- fail "federation.enabled needs federation.clientCertSecretName: a kubernetes.io/tls Secret with the front-proxy client certificate the other server trusts (docs/federation.md)" }}
{{- end }}
- {{ printf "--forward-to=%s" $f.url | quote }}
- --forward-client-cert-file=/etc/gpuscale/federation/client/tls.crt
- --forward-client-key-file=/etc/gpuscale/federation/client/tls.key
{{- if $f.caConfigMapName }}
- --forward-ca-file=/etc/gpuscale/federation/ca/{{ $f.caKey }}
{{- end }}
{{- with $f.timeout }}
- --forward-timeout={{ . }}
{{- end }}
{{- with $f.discoveryInterval }}
- --forward-discovery-interval={{ . }}
{{- end }}
{{- end }}
{{- end }}

{{/* The ServiceAccount Prometheus scrapes the adapter's /metrics as. */}}
{{- define "gpuscale.adapter.scraperName" -}}
{{- printf "%s-metrics-scraper" (include "gpuscale.adapter.fullname" .) }}
{{- end }}

{{/*
How Prometheus verifies the adapter: the CA that signed its certificate,
from the Secret that holds it (the adapter's own with generate,
cert-manager's with certManager, yours with adapter.tls.secretName, key
ca.crt), for the Service's name; serviceMonitor.adapterTLSConfig is merged
over it. A self-signed adapter cannot be verified: say so there.
*/}}
{{- define "gpuscale.adapter.scrapeTLSConfig" -}}
{{- $src := include "gpuscale.adapter.tlsSource" . }}
{{- $over := .Values.serviceMonitor.adapterTLSConfig | default dict }}
{{- $ca := dict "generate" (include "gpuscale.adapter.certsSecretName" .) "certManager" (include "gpuscale.adapter.tlsSecretName" .) "secret" .Values.adapter.tls.secretName }}
{{- if and (eq $src "selfSigned") (not $over) }}
{{- fail "serviceMonitor.enabled with adapter.tls.source=selfSigned: nothing can verify the adapter's certificate; set serviceMonitor.adapterTLSConfig (e.g. {insecureSkipVerify: true}, knowingly)" }}
{{- end }}
{{- $tls := dict }}
{{- if ne $src "selfSigned" }}
{{- $tls = dict "ca" (dict "secret" (dict "name" (get $ca $src) "key" "ca.crt")) "serverName" (printf "%s.%s.svc" (include "gpuscale.adapter.fullname" .) (include "gpuscale.namespace" .)) }}
{{- end }}
{{- toYaml (mergeOverwrite $tls $over) }}
{{- end }}

{{/*
The Pod Security level the release namespace needs: privileged where the
exporter runs (it mounts host paths, which baseline forbids), restricted
otherwise (the adapter meets it). podSecurity.enforce overrides it.
*/}}
{{- define "gpuscale.podSecurityLevel" -}}
{{- .Values.podSecurity.enforce | default (ternary "privileged" "restricted" .Values.exporter.enabled) }}
{{- end }}

{{/* The adapter container's volume mounts; dict ctx, tlsSource, queries. */}}
{{- define "gpuscale.adapter.volumeMounts" -}}
{{- if eq $.tlsSource "selfSigned" }}
- name: certs
  mountPath: /tmp/certs
{{- else if ne $.tlsSource "generate" }}
- name: tls
  mountPath: /etc/gpuscale/tls
  readOnly: true
{{- end }}
{{- if $.queries }}
- name: queries
  mountPath: /etc/gpuscale/queries
  readOnly: true
{{- end }}
{{- if $.ctx.Values.federation.enabled }}
- name: federation-client
  mountPath: /etc/gpuscale/federation/client
  readOnly: true
{{- if $.ctx.Values.federation.caConfigMapName }}
- name: federation-ca
  mountPath: /etc/gpuscale/federation/ca
  readOnly: true
{{- end }}
{{- end }}
{{- if include "gpuscale.kedaScaler.mountsClientCA" $.ctx }}
- name: keda-client-ca
  mountPath: /etc/gpuscale/keda-client-ca
  readOnly: true
{{- end }}
{{- if include "gpuscale.exporter.reservedLane" $.ctx }}
- name: exporter-token
  mountPath: /etc/gpuscale/exporter-token
  readOnly: true
{{- end }}
{{- with $.ctx.Values.adapter.extraVolumeMounts }}
{{- toYaml . | nindent 0 }}
{{- end }}
{{- end }}

{{/* The adapter pod's volumes; dict ctx, tlsSource, queries, name. */}}
{{- define "gpuscale.adapter.volumes" -}}
{{- if eq $.tlsSource "selfSigned" }}
- name: certs
  emptyDir: {}
{{- else if ne $.tlsSource "generate" }}
- name: tls
  secret:
    secretName: {{ include "gpuscale.adapter.tlsSecretName" $.ctx }}
{{- end }}
{{- if $.queries }}
- name: queries
  configMap:
    name: {{ $.name }}-queries
{{- end }}
{{- if $.ctx.Values.federation.enabled }}
- name: federation-client
  secret:
    secretName: {{ $.ctx.Values.federation.clientCertSecretName }}
{{- if $.ctx.Values.federation.caConfigMapName }}
- name: federation-ca
  configMap:
    name: {{ $.ctx.Values.federation.caConfigMapName }}
{{- end }}
{{- end }}
{{- if include "gpuscale.kedaScaler.mountsClientCA" $.ctx }}
- name: keda-client-ca
  secret:
    secretName: {{ $.ctx.Values.kedaScaler.clientCA.secretName }}
{{- end }}
{{- if include "gpuscale.exporter.reservedLane" $.ctx }}
{{- /* Optional: filled once the Secret exists; until then the adapter's scrapes carry no token. */}}
- name: exporter-token
  secret:
    secretName: {{ include "gpuscale.exporter.tokenSecretName" $.ctx }}
    optional: true
{{- end }}
{{- with $.ctx.Values.adapter.extraVolumes }}
{{- toYaml . | nindent 0 }}
{{- end }}
{{- end }}
