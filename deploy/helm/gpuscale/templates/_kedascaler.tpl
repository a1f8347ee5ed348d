{{/*
The KEDA external scaler port (kedaScaler values, docs/keda.md): the
adapter's flags, and the checks that refuse a scaler that KEDA could not
verify or that anyone could read.
*/}}

{{/*
Where KEDA's client credentials come from, with client authentication on:
  secret       kedaScaler.clientCA.secretName: a CA of yours signs KEDA's
               certificate; you make the TriggerAuthentication's Secret
  generate     the adapter makes a client CA and KEDA's certificate at
               runtime beside its own (adapter.tls.source=generate) and
               keeps them, with the serving CA bundle, in the Secret
               <fullname>-keda-client in kedaScaler.kedaNamespace
  certManager  cert-manager issues KEDA's certificate from the release's CA
               (adapter.tls.source=certManager) into <fullname>-keda-client
               in the release namespace
  none         client authentication off
*/}}
{{- define "gpuscale.kedaScaler.clientCredentials" -}}
{{- $k := .Values.kedaScaler -}}
{{- $src := include "gpuscale.adapter.tlsSource" . -}}
{{- if not $k.clientAuth }}none
{{- else if $k.clientCA.secretName }}secret
{{- else if has $src (list "generate" "certManager") }}{{ $src }}
{{- else }}
{{- fail (printf "kedaScaler.enabled with adapter.tls.source=%s needs kedaScaler.clientCA.secretName: a Secret holding the CA that signs KEDA's client certificate (with generate or certManager the chart makes KEDA's credentials; or, knowingly, kedaScaler.clientAuth=false)" $src) }}
{{- end }}
{{- end }}

{{/* The user (Common Name) of the client certificate the chart makes for
KEDA: the adapter's --keda-scaler-client-secret default, cert-manager's
Certificate. */}}
{{- define "gpuscale.kedaScaler.clientUser" -}}keda-operator{{- end }}

{{- define "gpuscale.kedaScaler.clientSecretName" -}}
{{- printf "%s-keda-client" (include "gpuscale.fullname" .) }}
{{- end }}

{{/* The namespace of KEDA's client Secret. */}}
{{- define "gpuscale.kedaScaler.clientSecretNamespace" -}}
{{- if eq (include "gpuscale.kedaScaler.clientCredentials" .) "generate" }}{{ .Values.kedaScaler.kedaNamespace }}
{{- else }}{{ include "gpuscale.namespace" . }}{{ end }}
{{- end }}

{{/* host:port a trigger's scalerAddress names. */}}
{{- define "gpuscale.kedaScaler.address" -}}
{{- printf "%s.%s.svc:%d" (include "gpuscale.adapter.fullname" .) (include "gpuscale.namespace" .) (int .Values.kedaScaler.port) }}
{{- end }}

{{- define "gpuscale.kedaScaler.args" -}}
{{- $k := .Values.kedaScaler -}}
{{- if $k.enabled }}
{{- if eq (include "gpuscale.adapter.tlsSource" .) "selfSigned" }}
{{- fail "kedaScaler.enabled serves the adapter's certificate, which KEDA must verify: adapter.tls.source=selfSigned cannot be; use generate, certManager or adapter.tls.secretName" }}
{{- end }}
- --keda-scaler-port={{ int $k.port }}
{{- $creds := include "gpuscale.kedaScaler.clientCredentials" . }}
{{- if eq $creds "secret" }}
- --keda-scaler-client-ca-file=/etc/gpuscale/keda-client-ca/{{ $k.clientCA.key }}
{{- else if eq $creds "generate" }}
- --keda-scaler-client-secret={{ $k.kedaNamespace }}/{{ include "gpuscale.kedaScaler.clientSecretName" . }}
{{- else if eq $creds "certManager" }}
{{- /* The release's CA signed KEDA's certificate; the serving Secret holds it as ca.crt. */}}
- --keda-scaler-client-ca-file=/etc/gpuscale/tls/ca.crt
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

{{/* The client CA's volume mount and volume, when a CA of the user's verifies clients. */}}
{{- define "gpuscale.kedaScaler.mountsClientCA" -}}
{{- if and .Values.kedaScaler.enabled (eq (include "gpuscale.kedaScaler.clientCredentials" .) "secret") }}true{{ end }}
{{- end }}
