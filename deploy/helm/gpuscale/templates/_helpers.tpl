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

{{- define "gpuscale.adapter.image" -}}
{{- printf "%s:%s" .Values.adapter.image.repository (default .Chart.AppVersion .Values.adapter.image.tag) }}
{{- end }}

{{- define "gpuscale.exporter.image" -}}
{{- printf "%s:%s" .Values.exporter.image.repository (default .Chart.AppVersion .Values.exporter.image.tag) }}
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
(exporter.reservedLane.secretName) or the one the chart generates. */}}
{{- define "gpuscale.exporter.tokenSecretName" -}}
{{- .Values.exporter.reservedLane.secretName | default (printf "%s-token" (include "gpuscale.exporter.fullname" .)) }}
{{- end }}

{{/* The adapter's flags. */}}
{{- define "gpuscale.adapter.args" -}}
{{- $c := .Values.adapter.config -}}
- --secure-port={{ .Values.adapter.securePort }}
{{- if eq (include "gpuscale.adapter.tlsSource" .) "selfSigned" }}
- --cert-dir=/tmp/certs
{{- else }}
- --tls-cert-file=/etc/gpuscale/tls/tls.crt
- --tls-private-key-file=/etc/gpuscale/tls/tls.key
{{- end }}
{{- range $flag, $key := dict "scrape-interval" "scrapeInterval" "scrape-timeout" "scrapeTimeout" "max-staleness" "maxStaleness" "ttft-window" "ttftWindow" "capacity-ttft-objective" "capacityTTFTObjective" }}
{{- with index $c $key }}
- --{{ $flag }}={{ . }}
{{- end }}
{{- end }}
{{- include "gpuscale.adapter.sourceArgs" . }}
{{- include "gpuscale.kedaScaler.args" . }}
- --exporter-selector={{ include "gpuscale.adapter.exporterSelector" . }}
- --exporter-namespace={{ $c.exporterNamespace | default .Release.Namespace }}
- --exporter-daemonset={{ $c.exporterDaemonSet | default (include "gpuscale.exporter.fullname" .) }}
- --exporter-port={{ $c.exporterPort }}
- --exporter-path={{ $c.exporterPath }}
{{- if include "gpuscale.exporter.reservedLane" . }}
- --exporter-token-file=/etc/gpuscale/exporter-token/token
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
{{- if .Values.scaleDown.enabled }}
- --scale-down-controller
- --scale-down-lease-namespace={{ .Release.Namespace }}
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
  generate     the chart makes a CA and a certificate once, keeps them in
               the Secret <adapter>-tls across upgrades, and sets caBundle
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

{{/*
The generated CA and serving certificate, as JSON of base64 PEM (ca, crt,
key). The first call makes them, or reuses the Secret an earlier install
left, so that upgrades keep the CA the APIServices trust; later calls in
the same render return the same pair, so the Secret and every APIService
agree.
*/}}
{{- define "gpuscale.adapter.generatedTLS" -}}
{{- $cache := .Values.adapter.tls -}}
{{- if not (hasKey $cache "generated") }}
{{- $name := include "gpuscale.adapter.fullname" . }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "gpuscale.adapter.tlsSecretName" .) }}
{{- $data := dig "data" dict $existing }}
{{- if and (index $data "ca.crt") (index $data "tls.crt") (index $data "tls.key") }}
{{- $_ := set $cache "generated" (dict "ca" (index $data "ca.crt") "crt" (index $data "tls.crt") "key" (index $data "tls.key")) }}
{{- else }}
{{- $svc := printf "%s.%s.svc" $name .Release.Namespace }}
{{- $ca := genCA (printf "%s-ca" $name) 3650 }}
{{- $cert := genSignedCert $svc nil (list $name (printf "%s.%s" $name .Release.Namespace) $svc (printf "%s.cluster.local" $svc)) 3650 $ca }}
{{- $_ := set $cache "generated" (dict "ca" ($ca.Cert | b64enc) "crt" ($cert.Cert | b64enc) "key" ($cert.Key | b64enc)) }}
{{- end }}
{{- end }}
{{- toJson (index $cache "generated") }}
{{- end }}

{{/* APIService TLS settings: the aggregator verifies the adapter unless
insecureSkipTLSVerify is chosen. "false" is written out: an APIService taken
over from another adapter (prometheus-adapter's skips verification by
default) keeps every field the chart leaves unset, and the API refuses
insecureSkipTLSVerify beside a caBundle. */}}
{{- define "gpuscale.apiService.tls" -}}
{{- $src := include "gpuscale.adapter.tlsSource" . -}}
{{- if .Values.apiService.caBundle }}
caBundle: {{ .Values.apiService.caBundle }}
insecureSkipTLSVerify: false
{{- else if eq $src "generate" }}
caBundle: {{ (include "gpuscale.adapter.generatedTLS" . | fromJson).ca }}
insecureSkipTLSVerify: false
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
