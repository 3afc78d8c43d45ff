{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "s3kv.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: release-chart, or the release name when it already contains the chart name. */}}
{{- define "s3kv.fullname" -}}
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

{{- define "s3kv.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "s3kv.labels" -}}
helm.sh/chart: {{ include "s3kv.chart" . }}
app.kubernetes.io/name: {{ include "s3kv.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: s3kv
{{- end }}

{{/* Selector of the gateway pods (the Service, PDB, NetworkPolicy and workload select these). */}}
{{- define "s3kv.selectorLabels" -}}
app.kubernetes.io/name: {{ include "s3kv.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gateway
{{- end }}

{{/* Label that lets a pod through the NetworkPolicy to the gateway. */}}
{{- define "s3kv.clientLabel" -}}
{{ include "s3kv.fullname" . | trunc 56 | trimSuffix "-" }}-client: "true"
{{- end }}

{{- define "s3kv.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "s3kv.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "s3kv.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "s3kv.secretName" -}}
{{- default (include "s3kv.fullname" .) .Values.credentials.existingSecret }}
{{- end }}

{{/* Key names in the Secret (the chart's own uses the environment names). */}}
{{- define "s3kv.secretKeys" -}}
{{- if .Values.credentials.existingSecret }}
{{- toJson .Values.credentials.existingSecretKeys }}
{{- else }}
{{- toJson (dict "frontAccessKey" "S3KV_ACCESS_KEY" "frontSecretKey" "S3KV_SECRET_KEY" "backendAccessKeyId" "AWS_ACCESS_KEY_ID" "backendSecretAccessKey" "AWS_SECRET_ACCESS_KEY") }}
{{- end }}
{{- end }}

{{/* A settings value as the string the gateway parses: whole numbers without an exponent. */}}
{{- define "s3kv.settingValue" -}}
{{- if kindIs "float64" . }}
{{- if eq (float64 (int64 .)) . }}{{ int64 . }}{{ else }}{{ . }}{{ end }}
{{- else if kindIs "bool" . }}
{{- ternary "true" "false" . }}
{{- else }}
{{- . }}
{{- end }}
{{- end }}

{{/* Internal traffic policy: Local for a DaemonSet (each pod talks to its node's gateway). */}}
{{- define "s3kv.internalTrafficPolicy" -}}
{{- if .Values.service.internalTrafficPolicy }}
{{- .Values.service.internalTrafficPolicy }}
{{- else if eq .Values.mode "daemonset" }}
{{- "Local" }}
{{- else }}
{{- "Cluster" }}
{{- end }}
{{- end }}

{{/* Session affinity: ClientIP in deployment mode, so an S3 client keeps one gateway and reads
its own writes at once (another replica sees them after seal plus replica sync). */}}
{{- define "s3kv.sessionAffinity" -}}
{{- if .Values.service.sessionAffinity }}
{{- .Values.service.sessionAffinity }}
{{- else if eq .Values.mode "deployment" }}
{{- "ClientIP" }}
{{- else }}
{{- "None" }}
{{- end }}
{{- end }}

{{/* Front and backend credentials as environment variables, from the Secret. */}}
{{- define "s3kv.credentialEnv" -}}
{{- $keys := include "s3kv.secretKeys" . | fromJson }}
{{- $secret := include "s3kv.secretName" . -}}
- name: S3KV_ACCESS_KEY
  valueFrom:
    secretKeyRef: {name: {{ $secret }}, key: {{ $keys.frontAccessKey }}}
- name: S3KV_SECRET_KEY
  valueFrom:
    secretKeyRef: {name: {{ $secret }}, key: {{ $keys.frontSecretKey }}}
{{ include "s3kv.backendEnv" . }}
{{- end }}

{{/* Backend (MinIO) credentials; optional so a workload identity can supply them instead. */}}
{{- define "s3kv.backendEnv" -}}
{{- $keys := include "s3kv.secretKeys" . | fromJson }}
{{- $secret := include "s3kv.secretName" . -}}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef: {name: {{ $secret }}, key: {{ $keys.backendAccessKeyId }}, optional: true}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef: {name: {{ $secret }}, key: {{ $keys.backendSecretAccessKey }}, optional: true}
{{- end }}

{{/* Checks across values that the JSON schema cannot express. */}}
{{- define "s3kv.validate" -}}
{{- include "s3kv.checkMemory" . }}
{{- if and .Values.autoscaling.enabled (ne .Values.mode "deployment") }}
{{- fail "autoscaling.enabled needs mode: deployment (a DaemonSet runs one gateway per node)" }}
{{- end }}
{{- if and .Values.sweep.enabled (not .Values.sweep.endpoint) }}
{{- fail "sweep.enabled needs sweep.endpoint: the MinIO endpoint(s) to sweep, URL[,URL...]" }}
{{- end }}
{{- /* SIGTERM: 20 s for requests in flight (s3kv/gateway/server.py: SHUTDOWN_GRACE 15 s, then
     SHUTDOWN_TIMEOUT 5 s), then the seal's uploads, one request of which may take
     backend_timeout (default 30 s) */}}
{{- $backendTimeout := 30.0 }}
{{- if not (kindIs "invalid" .Values.config.backend_timeout) }}
{{- $backendTimeout = .Values.config.backend_timeout }}
{{- end }}
{{- $needed := add (int .Values.preStop.sleepSeconds) 20 (int (ceil $backendTimeout)) }}
{{- if lt (int .Values.terminationGracePeriodSeconds) (int $needed) }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must cover preStop.sleepSeconds (%d) + the gateway's drain of requests in flight (20 s) + config.backend_timeout (%v s, a seal upload's request) to seal open segments: at least %d" (int .Values.terminationGracePeriodSeconds) (int .Values.preStop.sleepSeconds) $backendTimeout (int $needed)) }}
{{- end }}
{{- end }}
