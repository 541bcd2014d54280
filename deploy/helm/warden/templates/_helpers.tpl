{{/* Names and labels shared by every template. */}}
{{- define "warden.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "warden.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "warden.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "warden.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* selector COMPONENT: the selector labels of one component. */}}
{{- define "warden.selector" -}}
app.kubernetes.io/name: {{ include "warden.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "warden.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The Secret with admin-token and key-secret: existingSecret or the
chart's, derived from secrets.seed. */}}
{{- define "warden.secretName" -}}
{{- .Values.secrets.existingSecret | default (printf "%s-secrets" (include "warden.fullname" .)) }}
{{- end }}

{{- define "warden.apiTLSSecretName" -}}
{{- .Values.gateway.tls.secretName | default (printf "%s-api-tls" (include "warden.fullname" .)) }}
{{- end }}

{{/* The gateway replicas workers register with: every ordinal the HPA may create. */}}
{{- define "warden.gatewayCount" -}}
{{- if .Values.gateway.autoscaling.enabled }}{{ .Values.gateway.autoscaling.maxReplicas }}{{ else }}{{ .Values.gateway.replicas }}{{ end }}
{{- end }}

{{- define "warden.redisAddr" -}}
{{- if .Values.redis.enabled }}
{{- printf "%s-redis:6379" (include "warden.fullname" .) }}
{{- else }}
{{- required "redis.external.addr is required when redis.enabled is false" .Values.redis.external.addr }}
{{- end }}
{{- end }}

{{/* The gateway pod's terminationGracePeriodSeconds: preStop wait +
shutdown delay + drain + slack. */}}
{{- define "warden.gatewayGrace" -}}
{{- $g := .Values.gateway }}
{{- add $g.preStopSleepSeconds $g.shutdownDelaySeconds $g.drainTimeoutSeconds $g.terminationSlackSeconds }}
{{- end }}

{{/* A worker pod's terminationGracePeriodSeconds: drain + slack. */}}
{{- define "warden.workerGrace" -}}
{{- add .Values.worker.drainTimeoutSeconds .Values.worker.terminationSlackSeconds }}
{{- end }}

{{/* The pod securityContext of warden's pods (the image's warden user). */}}
{{- define "warden.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* The container securityContext of every container of the chart. */}}
{{- define "warden.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* topologySpread COMPONENT: the pod's topologySpreadConstraints. */}}
{{- define "warden.topologySpread" -}}
{{- $ts := .root.Values.topologySpread }}
{{- if $ts.enabled }}
topologySpreadConstraints:
{{- range $ts.topologyKeys }}
  - maxSkew: {{ $ts.maxSkew }}
    topologyKey: {{ . }}
    whenUnsatisfiable: {{ $ts.whenUnsatisfiable }}
    labelSelector:
      matchLabels:
        {{- include "warden.selector" (dict "root" $.root "component" $.component) | nindent 8 }}
{{- end }}
{{- end }}
{{- end }}

{{/* clusterTLSSecret (dict "root" . "peer" "gateway"|"worker"): the Secret
with a peer's cluster certificate: clusterTLS.<peer>SecretName, or the
chart's <fullname>-cluster-<peer> (cert-manager's or generated). */}}
{{- define "warden.clusterTLSSecret" -}}
{{- index .root.Values.clusterTLS (printf "%sSecretName" .peer) | default (printf "%s-cluster-%s" (include "warden.fullname" .root) .peer) }}
{{- end }}

{{/* Whether the chart generates the cluster certificates: no cert-manager
and no Secrets of yours named. Naming one of the two alone is refused:
both must chain to one CA. */}}
{{- define "warden.clusterTLSGenerated" -}}
{{- $c := .Values.clusterTLS }}
{{- if not .Values.certManager.enabled }}
{{- if ne (empty $c.gatewaySecretName) (empty $c.workerSecretName) }}
{{- fail "clusterTLS: set both gatewaySecretName and workerSecretName (Secrets of yours, one CA) or neither (the chart generates both): README.md, Certificates" }}
{{- end }}
{{- if empty $c.gatewaySecretName }}true{{ end }}
{{- end }}
{{- end }}

{{/* Whether the chart generates the public API's certificate: no
cert-manager, no gateway.tls.secretName, not plaintext. */}}
{{- define "warden.apiTLSGenerated" -}}
{{- if not (or .Values.certManager.enabled .Values.gateway.tls.secretName .Values.gateway.tls.plaintext) }}true{{ end }}
{{- end }}

{{/* generatedTLS: the CA and certificates the chart generates without
cert-manager (tls-generated.yaml) as JSON: {"ca": {"tls.crt", "tls.key"},
"secrets": [{"name", "notAfter", "data": {"tls.crt", "tls.key",
"ca.crt"}}]}, base64 as in a Secret's data; {} when nothing is
generated. Computed once per render and kept in .Values (every template
sees the same values), so the Secrets and the pods' checksum/tls
annotation describe the same keys. A Secret `lookup` finds is used as it
is: an upgrade renders what the install made. A leaf is re-issued by the
CA when its ca.crt is not the CA's, a key is missing, or its expiry (the
annotation warden-ai.github.io/not-after, written at issue; Helm cannot
parse certificates) is less than generatedTLS.renewBeforeDays away. */}}
{{- define "warden.generatedTLS" -}}
{{- if not (hasKey .Values "_generatedTLS") }}
{{- $out := dict }}
{{- $cluster := include "warden.clusterTLSGenerated" . }}
{{- $api := include "warden.apiTLSGenerated" . }}
{{- if or $cluster $api }}
{{- $full := include "warden.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- $g := .Values.generatedTLS }}
{{- if gt (int $g.certValidityDays) (int $g.caValidityDays) }}
{{- fail (printf "generatedTLS.certValidityDays (%d) exceeds generatedTLS.caValidityDays (%d): a certificate cannot outlive its CA" (int $g.certValidityDays) (int $g.caValidityDays)) }}
{{- end }}
{{- if ge (int $g.renewBeforeDays) (int $g.certValidityDays) }}
{{- fail (printf "generatedTLS.renewBeforeDays (%d) must be less than generatedTLS.certValidityDays (%d), or every upgrade re-issues the certificates" (int $g.renewBeforeDays) (int $g.certValidityDays)) }}
{{- end }}
{{- $layout := "2006-01-02T15:04:05Z07:00" }}
{{- $renewBefore := printf "-%dh" (mul 24 (int $g.renewBeforeDays)) }}
{{- $caSecret := lookup "v1" "Secret" $ns (printf "%s-generated-ca" $full) }}
{{- $ca := dict }}
{{- if $caSecret }}
{{- $ca = buildCustomCert (index $caSecret.data "tls.crt" | default "") (index $caSecret.data "tls.key" | default "") }}
{{- else }}
{{- $ca = genCAWithKey (printf "%s CA" $full) (int $g.caValidityDays) (genPrivateKey "ecdsa") }}
{{- end }}
{{- $caCrt := $ca.Cert | b64enc }}
{{- $leaves := list }}
{{- if $cluster }}
{{- range $peer := list "gateway" "worker" }}
{{- $leaves = append $leaves (dict "name" (include "warden.clusterTLSSecret" (dict "root" $ "peer" $peer)) "cn" $peer "dns" (list (printf "%s.identity.warden.invalid" $peer)) "ips" (list)) }}
{{- end }}
{{- end }}
{{- if $api }}
{{- $dns := list }}
{{- range $svc := list (printf "%s-gateway" $full) (printf "%s-gateway-admin" $full) }}
{{- $dns = concat $dns (list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns)) }}
{{- end }}
{{- $leaves = append $leaves (dict "name" (include "warden.apiTLSSecretName" .) "cn" (printf "%s-gateway" $full) "dns" (append $dns "localhost") "ips" (list "127.0.0.1")) }}
{{- end }}
{{- $secrets := list }}
{{- range $leaf := $leaves }}
{{- $oldSecret := lookup "v1" "Secret" $ns $leaf.name }}
{{- $old := $oldSecret.data | default dict }}
{{- $notAfter := "" }}
{{- with $oldSecret.metadata }}{{ with .annotations }}{{ $notAfter = index . "warden-ai.github.io/not-after" | default "" }}{{ end }}{{ end }}
{{- /* No annotation (made by hand, or before it existed): no known expiry, kept. An unparsable one is the zero time: re-issued. */}}
{{- $due := and $notAfter ((dateModify $renewBefore (toDate $layout $notAfter)).Before now) }}
{{- $data := dict }}
{{- if and (eq (index $old "ca.crt" | default "") $caCrt) (index $old "tls.crt") (index $old "tls.key") (not $due) }}
{{- $data = dict "tls.crt" (index $old "tls.crt") "tls.key" (index $old "tls.key") "ca.crt" $caCrt }}
{{- else }}
{{- $notAfter = dateModify (printf "%dh" (mul 24 (int $g.certValidityDays))) now | date $layout }}
{{- $c := genSignedCertWithKey $leaf.cn $leaf.ips $leaf.dns (int $g.certValidityDays) $ca (genPrivateKey "ecdsa") }}
{{- $data = dict "tls.crt" ($c.Cert | b64enc) "tls.key" ($c.Key | b64enc) "ca.crt" $caCrt }}
{{- end }}
{{- $secrets = append $secrets (dict "name" $leaf.name "notAfter" $notAfter "data" $data) }}
{{- end }}
{{- $out = dict "ca" (dict "tls.crt" $caCrt "tls.key" ($ca.Key | b64enc)) "secrets" $secrets }}
{{- end }}
{{- $_ := set .Values "_generatedTLS" $out }}
{{- end }}
{{- toJson (get .Values "_generatedTLS") }}
{{- end }}

{{/* Whether cert-manager issues the public API's certificate. */}}
{{- define "warden.apiTLSFromCertManager" -}}
{{- if and .Values.certManager.enabled (not .Values.gateway.tls.secretName) (not .Values.gateway.tls.plaintext) }}true{{ end }}
{{- end }}

{{/* The issuerRef of the chart's leaf Certificates. */}}
{{- define "warden.issuerRef" -}}
{{- with .Values.certManager.issuerRef }}
{{- toYaml . }}
{{- else }}
name: {{ include "warden.fullname" . }}-ca
kind: Issuer
group: cert-manager.io
{{- end }}
{{- end }}

{{- define "warden.model" -}}
{{- .Values.worker.model | default (first .Values.models).name }}
{{- end }}
