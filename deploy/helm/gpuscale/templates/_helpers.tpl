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

{{/* The adapter's flags. */}}
{{- define "gpuscale.adapter.args" -}}
{{- $c := .Values.adapter.config -}}
- --secure-port={{ .Values.adapter.securePort }}
{{- if .Values.adapter.tls.secretName }}
- --tls-cert-file=/etc/gpuscale/tls/tls.crt
- --tls-private-key-file=/etc/gpuscale/tls/tls.key
{{- else }}
- --cert-dir=/tmp/certs
{{- end }}
{{- range $flag, $key := dict "scrape-interval" "scrapeInterval" "scrape-timeout" "scrapeTimeout" "max-staleness" "maxStaleness" "ttft-window" "ttftWindow" "window" "window" }}
{{- with index $c $key }}
- --{{ $flag }}={{ . }}
{{- end }}
{{- end }}
- --exporter-selector={{ include "gpuscale.adapter.exporterSelector" . }}
- --exporter-namespace={{ $c.exporterNamespace | default .Release.Namespace }}
- --exporter-daemonset={{ $c.exporterDaemonSet | default (include "gpuscale.exporter.fullname" .) }}
- --exporter-port={{ $c.exporterPort }}
- --exporter-path={{ $c.exporterPath }}
{{- if $c.scrapeHostNetwork }}
- --scrape-host-network
{{- end }}
- --max-targets-per-namespace={{ int $c.maxTargetsPerNamespace }}
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
{{- range .Values.adapter.extraArgs }}
- {{ . }}
{{- end }}
{{- end }}

{{/* APIService TLS settings; caBundle wins over insecureSkipTLSVerify. */}}
{{- define "gpuscale.apiService.tls" -}}
{{- if .Values.apiService.caBundle }}
caBundle: {{ .Values.apiService.caBundle }}
{{- else if .Values.apiService.insecureSkipTLSVerify }}
insecureSkipTLSVerify: true
{{- end }}
{{- end }}

{{/* Whether the Prometheus Operator API is served. */}}
{{- define "gpuscale.monitoringAPI" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" }}true{{ end }}
{{- end }}
