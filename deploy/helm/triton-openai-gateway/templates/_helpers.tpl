{{/*
Names, labels and the few derived values every template shares. Every helper carries the
chart's prefix so it cannot collide with a parent chart's helpers.
*/}}

{{/* Chart name, overridable. */}}
{{- define "triton-openai-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* "<release>-<chart>" unless the release name already holds the chart name; 63 chars max. */}}
{{- define "triton-openai-gateway.fullname" -}}
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

{{/* Name of Triton's Deployment and Service (managed mode). */}}
{{- define "triton-openai-gateway.tritonFullname" -}}
{{- printf "%s-triton" (include "triton-openai-gateway.fullname" . | trunc 56 | trimSuffix "-") }}
{{- end }}

{{/* "name-version" for the helm.sh/chart label. */}}
{{- define "triton-openai-gateway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every resource. */}}
{{- define "triton-openai-gateway.labels" -}}
helm.sh/chart: {{ include "triton-openai-gateway.chart" . }}
app.kubernetes.io/name: {{ include "triton-openai-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: triton-openai-gateway
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector of the gateway pods (which hold Triton too in sidecar mode). */}}
{{- define "triton-openai-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "triton-openai-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gateway
{{- end }}

{{/* Selector of the chart-managed Triton pods. */}}
{{- define "triton-openai-gateway.tritonSelectorLabels" -}}
app.kubernetes.io/name: {{ include "triton-openai-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: triton
{{- end }}

{{/* The ServiceAccount the pods run as. */}}
{{- define "triton-openai-gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "triton-openai-gateway.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Gateway image reference. */}}
{{- define "triton-openai-gateway.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Triton image reference. */}}
{{- define "triton-openai-gateway.tritonImage" -}}
{{- printf "%s:%s" .Values.triton.image.repository .Values.triton.image.tag }}
{{- end }}

{{/* True (non-empty) when the chart runs Triton itself. */}}
{{- define "triton-openai-gateway.runsTriton" -}}
{{- if or (eq .Values.triton.mode "managed") (eq .Values.triton.mode "sidecar") }}true{{ end }}
{{- end }}

{{/*
Name of the headless Service over the managed Triton pods: 47 + "-triton-headless" stays within
63 characters.
*/}}
{{- define "triton-openai-gateway.tritonHeadlessName" -}}
{{- printf "%s-triton-headless" (include "triton-openai-gateway.fullname" . | trunc 47 | trimSuffix "-") }}
{{- end }}

{{/*
True (non-empty) when the gateway routes across several managed Triton replicas itself: it is
given the headless Service as a dns:/// target and re-resolves it, so every ready Triton pod is a
replica it picks per request. One replica keeps the plain host:port of the ClusterIP Service, as
before: nothing to route, and a gateway image from before replica routing still starts.
*/}}
{{- define "triton-openai-gateway.routesAcrossTriton" -}}
{{- if and (eq .Values.triton.mode "managed") (gt (int .Values.triton.replicaCount) 1) }}true{{ end }}
{{- end }}

{{/*
GATEWAY_TRITON_URL: the external URL, the managed Triton Service (its headless Service's DNS
name when there are several replicas), or localhost in the pod.
*/}}
{{- define "triton-openai-gateway.tritonUrl" -}}
{{- if eq .Values.triton.mode "external" }}
{{- .Values.triton.external.url }}
{{- else if eq .Values.triton.mode "sidecar" }}
{{- printf "127.0.0.1:%d" (int .Values.triton.ports.grpc) }}
{{- else if include "triton-openai-gateway.routesAcrossTriton" . }}
{{- printf "dns:///%s.%s.svc.%s:%d" (include "triton-openai-gateway.tritonHeadlessName" .) .Release.Namespace (trimSuffix "." .Values.clusterDomain) (int .Values.triton.ports.grpc) }}
{{- else }}
{{- printf "%s:%d" (include "triton-openai-gateway.tritonFullname" .) (int .Values.triton.ports.grpc) }}
{{- end }}
{{- end }}

{{/*
Strategy of the managed Triton Deployment: triton.strategy when set. Otherwise one replica
recreates (a surge pod would need a spare GPU, which clusters rarely have, and the rollout would
hang); several replicas roll one pod at a time without a surge, so the others keep serving and
the gateway routes around the one being replaced.
*/}}
{{- define "triton-openai-gateway.tritonStrategy" -}}
{{- if .Values.triton.strategy }}
{{- toYaml .Values.triton.strategy }}
{{- else if and (eq .Values.triton.mode "managed") (gt (int .Values.triton.replicaCount) 1) }}
type: RollingUpdate
rollingUpdate:
  maxSurge: 0
  maxUnavailable: 1
{{- else }}
type: Recreate
{{- end }}
{{- end }}

{{/* Name of the Secret holding the API keys. */}}
{{- define "triton-openai-gateway.apiKeySecretName" -}}
{{- default (printf "%s-api-keys" (include "triton-openai-gateway.fullname" .)) .Values.auth.existingSecret }}
{{- end }}

{{/* Name of the Secret holding GATEWAY_REASONING_SECRET. */}}
{{- define "triton-openai-gateway.reasoningSecretName" -}}
{{- default (printf "%s-reasoning" (include "triton-openai-gateway.fullname" .)) .Values.gateway.reasoningSecret.existingSecret }}
{{- end }}

{{/* GATEWAY_API_KEY_FILE. */}}
{{- define "triton-openai-gateway.apiKeyFile" -}}
{{- printf "%s/%s" (trimSuffix "/" .Values.auth.mountPath) .Values.auth.secretKey }}
{{- end }}

{{/* The model PVC: the existing one, or the one the chart creates. */}}
{{- define "triton-openai-gateway.modelClaimName" -}}
{{- default (printf "%s-models" (include "triton-openai-gateway.fullname" .)) .Values.triton.modelRepository.pvc.existingClaim }}
{{- end }}

{{/* True (non-empty) when the gateway container mounts the model repository. */}}
{{- define "triton-openai-gateway.gatewayMountsModels" -}}
{{- if .Values.gateway.modelRepository.enabled }}
{{- if include "triton-openai-gateway.runsTriton" . }}true
{{- else if .Values.gateway.modelRepository.existingClaim }}true
{{- end }}
{{- end }}
{{- end }}

{{/* GATEWAY_MODEL_REPOSITORY when mounted. */}}
{{- define "triton-openai-gateway.gatewayModelRepository" -}}
{{- if include "triton-openai-gateway.runsTriton" . }}
{{- .Values.triton.modelRepository.path }}
{{- else }}
{{- .Values.gateway.modelRepository.path }}
{{- end }}
{{- end }}

{{/* Mount path of the model volume in the gateway container. */}}
{{- define "triton-openai-gateway.gatewayModelMountPath" -}}
{{- if include "triton-openai-gateway.runsTriton" . }}
{{- .Values.triton.modelRepository.mountPath }}
{{- else }}
{{- .Values.gateway.modelRepository.mountPath }}
{{- end }}
{{- end }}

{{/*
The "models" volume: the PVC, or an emptyDir the init container fills from an image. External
mode with gateway.modelRepository.existingClaim: that PVC.
*/}}
{{- define "triton-openai-gateway.modelVolume" -}}
- name: models
{{- if not (include "triton-openai-gateway.runsTriton" .) }}
  persistentVolumeClaim:
    claimName: {{ .Values.gateway.modelRepository.existingClaim }}
    readOnly: true
{{- else if eq .Values.triton.modelRepository.source "pvc" }}
  persistentVolumeClaim:
    claimName: {{ include "triton-openai-gateway.modelClaimName" . }}
{{- else }}
  emptyDir:
    sizeLimit: {{ .Values.triton.modelRepository.image.sizeLimit }}
{{- end }}
{{- end }}

{{/* The init container copying the repository out of an image (source: image). */}}
{{- define "triton-openai-gateway.modelInitContainer" -}}
{{- $repo := .Values.triton.modelRepository }}
{{- if and (include "triton-openai-gateway.runsTriton" .) (eq $repo.source "image") }}
- name: copy-model-repository
  image: {{ printf "%s:%s" $repo.image.repository $repo.image.tag | quote }}
  imagePullPolicy: {{ $repo.image.pullPolicy }}
  command: ["sh", "-c", "cp -a \"$0\"/. \"$1\"/", {{ $repo.image.sourcePath | quote }}, {{ $repo.mountPath | quote }}]
  securityContext:
    {{- toYaml .Values.gateway.securityContext | nindent 4 }}
  volumeMounts:
    - name: models
      mountPath: {{ $repo.mountPath }}
{{- end }}
{{- end }}

{{/* The volumeMount of the model volume (subPath for PVCs). */}}
{{- define "triton-openai-gateway.modelVolumeMount" -}}
- name: models
  mountPath: {{ .mountPath }}
  {{- if .readOnly }}
  readOnly: true
  {{- end }}
  {{- if .subPath }}
  subPath: {{ .subPath }}
  {{- end }}
{{- end }}

{{/* Streaming annotations merged with the user's (the user's win). */}}
{{- define "triton-openai-gateway.ingressAnnotations" -}}
{{- $annotations := dict }}
{{- if .Values.ingress.streaming }}
{{- $annotations = merge $annotations (deepCopy .Values.ingress.streamingAnnotations) }}
{{- end }}
{{- $annotations = mergeOverwrite $annotations (deepCopy .Values.ingress.annotations) }}
{{- with $annotations }}
{{- toYaml . }}
{{- end }}
{{- end }}

{{/* Grace period of gateway pods: given, or preStop pause + drain + 10 s margin. */}}
{{- define "triton-openai-gateway.gatewayGracePeriod" -}}
{{- $g := .Values.gateway }}
{{- if kindIs "invalid" $g.terminationGracePeriodSeconds }}
{{- add (include "triton-openai-gateway.gatewayDrainSeconds" . | int) 10 }}
{{- else }}
{{- $g.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}

{{/* Seconds from SIGTERM until the gateway has drained: preStop pause + shutdown grace. */}}
{{- define "triton-openai-gateway.gatewayDrainSeconds" -}}
{{- add (int .Values.gateway.preStopSleepSeconds) (int (ceil .Values.gateway.shutdownGracePeriod)) }}
{{- end }}

{{/*
The responses store. "storeSqlite" is true (non-empty) when the gateway stores responses in a
SQLite file, the only case that needs the state volume and allows one pod alone. A URL from
existingSecret is taken for PostgreSQL (what the Secret is for: the URL carries a password).
*/}}
{{- define "triton-openai-gateway.storeSqlite" -}}
{{- $s := .Values.responsesStore }}
{{- if and $s.enabled (not $s.existingSecret) (or (not $s.url) (hasPrefix "sqlite:" (lower $s.url))) }}true{{ end }}
{{- end }}

{{/* GATEWAY_RESPONSES_STORE when it goes in the ConfigMap: the URL, or the file on the volume. */}}
{{- define "triton-openai-gateway.storeUrl" -}}
{{- $s := .Values.responsesStore }}
{{- default (printf "sqlite:///%s/responses.db" (trimSuffix "/" $s.persistence.mountPath)) $s.url }}
{{- end }}

{{/* The PVC of the SQLite file: the existing one, or the one the chart creates. */}}
{{- define "triton-openai-gateway.storeClaimName" -}}
{{- default (printf "%s-responses" (include "triton-openai-gateway.fullname" .)) .Values.responsesStore.persistence.existingClaim }}
{{- end }}

{{/* True (non-empty) when more than one gateway pod may run at once (HPA or replicaCount). */}}
{{- define "triton-openai-gateway.severalPods" -}}
{{- if .Values.autoscaling.enabled }}
{{- if gt (int .Values.autoscaling.maxReplicas) 1 }}true{{ end }}
{{- else if gt (int .Values.gateway.replicaCount) 1 }}true
{{- end }}
{{- end }}

{{/* The gateway Deployment's strategy: a SQLite file on a PVC is held by one pod at a time. */}}
{{- define "triton-openai-gateway.gatewayStrategy" -}}
{{- if and (include "triton-openai-gateway.storeSqlite" .) .Values.responsesStore.persistence.enabled }}
type: Recreate
{{- else if eq .Values.triton.mode "sidecar" }}
{{- include "triton-openai-gateway.tritonStrategy" . }}
{{- else }}
{{- toYaml .Values.gateway.strategy }}
{{- end }}
{{- end }}

{{/* Name of the InferencePool (inferencePool.enabled): the EPP's --pool-name. */}}
{{- define "triton-openai-gateway.inferencePoolName" -}}
{{- default (include "triton-openai-gateway.fullname" .) .Values.inferencePool.name }}
{{- end }}

{{/*
True (non-empty) when the release serves TensorRT-LLM models: a chart-run Triton on a
"-trtllm-" image, or a gateway.modelFiles entry that names a TensorRT-LLM layout or route.
*/}}
{{- define "triton-openai-gateway.servesTensorrtLLM" -}}
{{- $found := and (include "triton-openai-gateway.runsTriton" .) (contains "trtllm" .Values.triton.image.tag) }}
{{- range $name, $files := .Values.gateway.modelFiles }}
{{- if has (toString (get $files "layout")) (list "ensemble" "bls" "tensorrt_llm" "llmapi") }}{{ $found = true }}{{ end }}
{{- if has (toString (get $files "trtllm_route")) (list "model" "tokens") }}{{ $found = true }}{{ end }}
{{- end }}
{{- if $found }}true{{ end }}
{{- end }}

{{/*
GATEWAY_METRICS_PORT, or empty: gateway.metrics.port, else 9464 when auth.enabled and no
InferencePool (with API keys /metrics on the gateway port needs a key, which a scraper does not
send; on a port of its own it needs none), else none (/metrics on the gateway port).
*/}}
{{- define "triton-openai-gateway.metricsPort" -}}
{{- $m := .Values.gateway.metrics }}
{{- if not $m.enabled }}
{{- else if not (kindIs "invalid" $m.port) }}{{ $m.port }}
{{- else if and .Values.auth.enabled (not .Values.inferencePool.enabled) }}9464
{{- end }}
{{- end }}
