{{/* The gateway pod, shared by the Deployment and the DaemonSet. */}}
{{- define "s3kv.podTemplate" -}}
metadata:
  labels:
    {{- include "s3kv.labels" . | nindent 4 }}
    app.kubernetes.io/component: gateway
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    {{- /* pods roll when the settings or the credentials change */}}
    checksum/config: {{ include (print $.Template.BasePath "/configmap.yaml") . | sha256sum }}
    {{- if .Values.credentials.existingSecret }}
    checksum/secret: {{ toJson (list .Values.credentials.existingSecret .Values.credentials.existingSecretKeys) | sha256sum }}
    {{- else }}
    checksum/secret: {{ toJson (list .Values.credentials.front .Values.credentials.backend) | sha256sum }}
    {{- end }}
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "s3kv.serviceAccountName" . }}
  automountServiceAccountToken: {{ .Values.serviceAccount.automountServiceAccountToken }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
  containers:
    - name: gateway
      image: {{ include "s3kv.image" . }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      args: ["serve"]
      ports:
        - name: http
          containerPort: {{ .Values.containerPort }}
          protocol: TCP
      envFrom:
        - configMapRef:
            name: {{ include "s3kv.fullname" . }}
      env:
        {{- include "s3kv.credentialEnv" . | nindent 8 }}
        {{- /* a stable id per replica: on a restart the gateway aborts its own unfinished uploads */}}
        - name: S3KV_NODE_ID
          valueFrom:
            fieldRef:
              fieldPath: {{ eq .Values.mode "daemonset" | ternary "spec.nodeName" "metadata.name" }}
        {{- with .Values.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      startupProbe:
        httpGet: {path: /healthz, port: http}
        {{- toYaml .Values.probes.startup | nindent 8 }}
      livenessProbe:
        httpGet: {path: /healthz, port: http}
        {{- toYaml .Values.probes.liveness | nindent 8 }}
      readinessProbe:
        httpGet: {path: /readyz, port: http}
        {{- toYaml .Values.probes.readiness | nindent 8 }}
      lifecycle:
        preStop:
          {{- /* keep serving while endpoints drop this pod; SIGTERM then seals open segments */}}
          exec:
            command: ["sleep", "{{ .Values.preStop.sleepSeconds }}"]
      resources:
        {{- toYaml .Values.resources | nindent 8 }}
      securityContext:
        {{- toYaml .Values.securityContext | nindent 8 }}
      volumeMounts:
        - name: tmp
          mountPath: /tmp
        {{- with .Values.extraVolumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
  volumes:
    - name: tmp
      emptyDir:
        sizeLimit: {{ .Values.tmpVolume.sizeLimit }}
    {{- with .Values.extraVolumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
