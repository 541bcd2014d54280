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
