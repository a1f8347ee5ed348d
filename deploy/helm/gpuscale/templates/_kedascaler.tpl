{{/*
The KEDA external scaler port (kedaScaler values, docs/keda.md): the
adapter's flags, and the checks that refuse a scaler that KEDA could not
verify or that anyone could read.
*/}}
{{- define "gpuscale.kedaScaler.args" -}}
{{- $k := .Values.kedaScaler -}}
{{- if $k.enabled }}
{{- if eq (include "gpuscale.adapter.tlsSource" .) "selfSigned" }}
{{- fail "kedaScaler.enabled serves the adapter's certificate, which KEDA must verify: adapter.tls.source=selfSigned cannot be; use generate, certManager or adapter.tls.secretName" }}
{{- end }}
- --keda-scaler-port={{ int $k.port }}
{{- if $k.clientAuth }}
{{- if not $k.clientCA.secretName }}
{{- fail "kedaScaler.enabled needs kedaScaler.clientCA.secretName: a Secret holding the CA that signs KEDA's client certificate (or, knowingly, kedaScaler.clientAuth=false)" }}
{{- end }}
- --keda-scaler-client-ca-file=/etc/gpuscale/keda-client-ca/{{ $k.clientCA.key }}
{{- else }}
- --keda-scaler-no-client-auth
{{- end }}
{{- with $k.checkInterval }}
- --keda-scaler-check-interval={{ . }}
{{- end }}
{{- include "gpuscale.kedaScaler.boundsArgs" . }}
{{- end }}
{{- end }}

{{/* Who reads which namespace, and the bounds on connections and streams. */}}
{{- define "gpuscale.kedaScaler.boundsArgs" -}}
{{- $k := .Values.kedaScaler -}}
{{- if and (eq $k.authorization "subjectaccessreview") (not $k.clientAuth) }}
{{- fail "kedaScaler.authorization=subjectaccessreview authorizes client certificates: it needs kedaScaler.clientAuth (or, knowingly, kedaScaler.authorization=none)" }}
{{- end }}
- --keda-scaler-authorization={{ $k.authorization }}
{{- range $flag, $key := dict "max-connections" "maxConnections" "max-connections-per-address" "maxConnectionsPerAddress" "max-streams" "maxStreams" "max-streams-per-namespace" "maxStreamsPerNamespace" }}
{{- with index $k.limits $key }}
- --keda-scaler-{{ $flag }}={{ int . }}
{{- end }}
{{- end }}
{{- end }}

{{/* The client CA's volume mount and volume, when client certificates are required. */}}
{{- define "gpuscale.kedaScaler.mountsClientCA" -}}
{{- if and .Values.kedaScaler.enabled .Values.kedaScaler.clientAuth }}true{{ end }}
{{- end }}
