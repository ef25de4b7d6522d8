{{/*
Triton's container and its volumes, shared by the managed Triton Deployment and by the
gateway's pod in sidecar mode.
*/}}

{{- define "triton-openai-gateway.tritonContainer" -}}
{{- $t := .Values.triton -}}
- name: triton
  image: {{ include "triton-openai-gateway.tritonImage" . | quote }}
  imagePullPolicy: {{ $t.image.pullPolicy }}
  command: ["tritonserver"]
  args:
    - --model-repository={{ $t.modelRepository.path }}
    - --grpc-port={{ $t.ports.grpc }}
    - --http-port={{ $t.ports.http }}
    - --metrics-port={{ $t.ports.metrics }}
    {{- with $t.extraArgs }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  env:
    # vLLM, torch and the Hugging Face libraries write caches under HOME; the root filesystem
    # of NGC images is not writable by a non-root user there.
    - name: HOME
      value: /home/triton-cache
    - name: HF_HOME
      value: /home/triton-cache/huggingface
    {{- with $t.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: grpc
      containerPort: {{ $t.ports.grpc }}
      protocol: TCP
    - name: triton-http
      containerPort: {{ $t.ports.http }}
      protocol: TCP
    - name: triton-metrics
      containerPort: {{ $t.ports.metrics }}
      protocol: TCP
  startupProbe:
    httpGet:
      path: /v2/health/live
      port: triton-http
    {{- toYaml $t.startupProbe | nindent 4 }}
  livenessProbe:
    httpGet:
      path: /v2/health/live
      port: triton-http
    {{- toYaml $t.livenessProbe | nindent 4 }}
  readinessProbe:
    httpGet:
      path: /v2/health/ready
      port: triton-http
    {{- toYaml $t.readinessProbe | nindent 4 }}
  {{- if eq $t.mode "sidecar" }}
  # Sidecar mode: stay up while the gateway in this pod drains its streams after SIGTERM.
  lifecycle:
    preStop:
      exec:
        command: ["sleep", "{{ include "triton-openai-gateway.gatewayDrainSeconds" . }}"]
  {{- end }}
  resources:
    {{- toYaml $t.resources | nindent 4 }}
  securityContext:
    {{- toYaml $t.securityContext | nindent 4 }}
  volumeMounts:
    {{- include "triton-openai-gateway.modelVolumeMount" (dict "mountPath" $t.modelRepository.mountPath "subPath" (ternary $t.modelRepository.pvc.subPath "" (eq $t.modelRepository.source "pvc"))) | nindent 4 }}
    - name: dshm
      mountPath: /dev/shm
    - name: triton-cache
      mountPath: /home/triton-cache
{{- end }}

{{/* Volumes Triton needs besides "models". */}}
{{- define "triton-openai-gateway.tritonVolumes" -}}
- name: dshm
  emptyDir:
    medium: Memory
    sizeLimit: {{ .Values.triton.shmSize }}
- name: triton-cache
  emptyDir: {}
{{- end }}
