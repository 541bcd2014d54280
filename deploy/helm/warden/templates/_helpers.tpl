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

{{/* The pod's terminationGracePeriodSeconds: preStop wait + drain + slack. */}}
{{- define "warden.gatewayGrace" -}}
{{- add .Values.gateway.preStopSleepSeconds .Values.gateway.drainTimeoutSeconds .Values.gateway.terminationSlackSeconds }}
{{- end }}

{{- define "warden.model" -}}
{{- .Values.worker.model | default (first .Values.models).name }}
{{- end }}
