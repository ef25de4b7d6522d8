{{/*
Checks of value combinations the schema cannot express. Included at the top of
deployment.yaml, so a bad release fails at template time with a message that says what to set.
*/}}
{{- define "triton-openai-gateway.validate" -}}
{{- $t := .Values.triton }}
{{- $g := .Values.gateway }}
{{- if and (eq $t.mode "external") (not $t.external.url) }}
{{- fail "triton.mode=external needs triton.external.url (Triton's gRPC endpoint, host:port)" }}
{{- end }}
{{- if eq $t.mode "external" }}
{{- range $endpoint := splitList "," $t.external.url }}
{{- if not (regexMatch "^(dns:///)?([^:/, ]+|\\[[0-9a-fA-F:]+\\]):[0-9]+$" (trim $endpoint)) }}
{{- fail (printf "triton.external.url must be host:port (gRPC, no scheme), dns:///host:port (a name re-resolved, e.g. a headless Service), or several of these separated by commas; got %q" $t.external.url) }}
{{- end }}
{{- end }}
{{- if gt (int $t.replicaCount) 1 }}
{{- fail "triton.replicaCount applies to the chart-run Triton (triton.mode=managed); in external mode the chart runs none. List your replicas in triton.external.url (host:port,host:port) or give a headless Service as dns:///<service>.<namespace>.svc.cluster.local:8001, and the gateway routes across them" }}
{{- end }}
{{- end }}
{{- if and (eq $t.mode "sidecar") (gt (int $t.replicaCount) 1) }}
{{- fail "triton.replicaCount applies to triton.mode=managed; in sidecar mode each gateway pod carries one Triton: scale with gateway.replicaCount (or autoscaling), or switch to triton.mode=managed for Triton replicas the gateway routes across" }}
{{- end }}
{{- if include "triton-openai-gateway.runsTriton" . }}
{{- if and (eq $t.modelRepository.source "image") (not $t.modelRepository.image.repository) }}
{{- fail "triton.modelRepository.source=image needs triton.modelRepository.image.repository" }}
{{- end }}
{{- $root := trimSuffix "/" $t.modelRepository.mountPath }}
{{- if not (or (eq $t.modelRepository.path $root) (hasPrefix (printf "%s/" $root) $t.modelRepository.path)) }}
{{- fail (printf "triton.modelRepository.path (%s) must lie inside triton.modelRepository.mountPath (%s)" $t.modelRepository.path $root) }}
{{- end }}
{{- end }}
{{- if or (eq (int $t.ports.grpc) (int $t.ports.http)) (eq (int $t.ports.grpc) (int $t.ports.metrics)) (eq (int $t.ports.http) (int $t.ports.metrics)) }}
{{- fail "triton.ports: grpc, http and metrics must be three different ports" }}
{{- end }}
{{- if eq $t.mode "sidecar" }}
{{- $drain := include "triton-openai-gateway.gatewayDrainSeconds" . | int }}
{{- if lt (int $t.terminationGracePeriodSeconds) (add $drain 10) }}
{{- fail (printf "sidecar mode: triton.terminationGracePeriodSeconds must be at least %d (gateway.preStopSleepSeconds + gateway.shutdownGracePeriod + 10) so Triton outlives the gateway's drain" (add $drain 10)) }}
{{- end }}
{{- range $name, $port := $t.ports }}
{{- if eq (int $port) (int $g.port) }}
{{- fail (printf "sidecar mode: gateway.port %d collides with triton.ports.%s; both containers share the pod's network" (int $g.port) $name) }}
{{- end }}
{{- end }}
{{- end }}
{{- if .Values.auth.enabled }}
{{- if and .Values.auth.existingSecret .Values.auth.apiKeys }}
{{- fail "auth: set auth.apiKeys or auth.existingSecret, not both" }}
{{- end }}
{{- if not (or .Values.auth.existingSecret .Values.auth.apiKeys) }}
{{- fail "auth.enabled needs auth.existingSecret (recommended) or auth.apiKeys" }}
{{- end }}
{{- range .Values.auth.apiKeys }}
{{- if or (not .) (regexMatch "[\\s]" .) }}
{{- fail "auth.apiKeys: keys must be non-empty and contain no whitespace (the file holds one key per line)" }}
{{- end }}
{{- end }}
{{- end }}
{{- if and .Values.autoscaling.enabled (gt (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas)) }}
{{- fail "autoscaling.minReplicas must not exceed autoscaling.maxReplicas" }}
{{- end }}
{{- if and .Values.autoscaling.enabled (kindIs "invalid" .Values.autoscaling.targetCPUUtilizationPercentage) (kindIs "invalid" .Values.autoscaling.targetMemoryUtilizationPercentage) }}
{{- fail "autoscaling.enabled needs targetCPUUtilizationPercentage or targetMemoryUtilizationPercentage" }}
{{- end }}
{{- if and $g.metrics.serviceMonitor.enabled (not $g.metrics.enabled) }}
{{- fail "gateway.metrics.serviceMonitor.enabled needs gateway.metrics.enabled (nothing to scrape otherwise)" }}
{{- end }}
{{- if and .Values.httpRoute.enabled (not .Values.httpRoute.parentRefs) }}
{{- fail "httpRoute.enabled needs httpRoute.parentRefs (the Gateway to attach to)" }}
{{- end }}
{{- if and .Values.ingress.enabled (not .Values.ingress.hosts) }}
{{- fail "ingress.enabled needs at least one entry in ingress.hosts" }}
{{- end }}
{{- include "triton-openai-gateway.validateStore" . }}
{{- include "triton-openai-gateway.validateInferencePool" . }}
{{- include "triton-openai-gateway.validateModelFiles" . }}
{{- end }}

{{/*
gateway.modelFiles: the files it names are read by the gateway, and the only files a gateway pod
has are the model volume's (mounted read-only where Triton mounts it). A chat_template it cannot
read stops the gateway at start; a tokenizer path off the volume is never found. A model driven
with token ids (layout tensorrt_llm, or trtllm_route tokens: a TensorRT-LLM ensemble or BLS
through its tensorrt_llm step) is tokenized with the tokenizer its config names, on that volume,
so the gateway must mount it.
*/}}
{{- define "triton-openai-gateway.validateModelFiles" -}}
{{- $mounted := include "triton-openai-gateway.gatewayMountsModels" . }}
{{- $root := trimSuffix "/" (include "triton-openai-gateway.gatewayModelMountPath" .) }}
{{- $mount := "gateway.modelRepository.enabled=true" }}
{{- if not (include "triton-openai-gateway.runsTriton" .) }}
{{- $mount = "gateway.modelRepository.existingClaim, a PVC with the repository at the paths Triton sees" }}
{{- end }}
{{- range $name, $files := .Values.gateway.modelFiles }}
{{- range $key := list "tokenizer" "chat_template" }}
{{- $path := toString (get $files $key) }}
{{- if hasPrefix "/" $path }}
{{- if not $mounted }}
{{- fail (printf "gateway.modelFiles.%s.%s (%s) is a file the gateway reads, and the gateway mounts no model volume: set %s" $name $key $path $mount) }}
{{- end }}
{{- if or (not (hasPrefix (printf "%s/" $root) $path)) (contains "/../" $path) }}
{{- fail (printf "gateway.modelFiles.%s.%s (%s) must lie under the model volume's mountPath (%s): the gateway pod has no other files to read it from" $name $key $path $root) }}
{{- end }}
{{- end }}
{{- end }}
{{- $layout := toString (get $files "layout") }}
{{- $route := toString (get $files "trtllm_route") }}
{{- if and (not $mounted) (or (eq $layout "tensorrt_llm") (eq $route "tokens")) }}
{{- fail (printf "gateway.modelFiles.%s: %s sends token ids, which the gateway makes with the model's tokenizer (the tokenizer_dir its Triton config names, or this entry's tokenizer) read from the model volume; the gateway mounts none: set %s" $name (ternary "layout tensorrt_llm" "trtllm_route tokens" (eq $layout "tensorrt_llm")) $mount) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The InferencePool: its endpoints are gateway pods, and the endpoint picker chooses one by the
queue each reports. That means something only when every pod has its own Triton (sidecar mode);
with a managed or external Triton all pods front the same Triton replicas and each gateway picks
the replica itself, so the picker's choice would be noise.
The picker scrapes /metrics on the gateway port without an API key: with the pool on, the chart
opens it (GATEWAY_METRICS_REQUIRE_AUTH false) and puts it on no port of its own.
*/}}
{{- define "triton-openai-gateway.validateInferencePool" -}}
{{- $p := .Values.inferencePool }}
{{- if $p.enabled }}
{{- if ne .Values.triton.mode "sidecar" }}
{{- fail (printf "inferencePool.enabled needs triton.mode=sidecar (got %q): the pool's endpoints are gateway pods and the endpoint picker chooses one by its queue, which only means something when each pod carries its own Triton. With a managed or external Triton every gateway pod fronts the same Tritons and picks the replica itself: for several Triton replicas set triton.replicaCount (managed) or list them in triton.external.url, and leave the InferencePool off; or switch to sidecar mode" .Values.triton.mode) }}
{{- end }}
{{- if not $p.endpointPicker.serviceName }}
{{- fail "inferencePool.enabled needs inferencePool.endpointPicker.serviceName: the Service of an endpoint picker (EPP) started with --pool-name set to this pool; the chart does not run one (docs/DEPLOY.md, \"GIE across sidecar pods\")" }}
{{- end }}
{{- if not .Values.gateway.metrics.enabled }}
{{- fail "inferencePool.enabled needs gateway.metrics.enabled: the endpoint picker chooses pods by the vllm:* gauges on the gateway's /metrics" }}
{{- end }}
{{- if not (kindIs "invalid" .Values.gateway.metrics.port) }}
{{- fail "inferencePool.enabled cannot go with gateway.metrics.port: the endpoint picker scrapes /metrics on the gateway port" }}
{{- end }}
{{- if .Values.gateway.extraSettings.metrics_require_auth }}
{{- fail "inferencePool.enabled cannot go with gateway.extraSettings.metrics_require_auth: the endpoint picker scrapes /metrics without an API key" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The responses store: a URL the gateway can open from a read-only root filesystem, no password
in the ConfigMap, and no SQLite file behind several pods (each pod would keep its own
conversations, so a previous_response_id sent to another pod would not be found).
*/}}
{{- define "triton-openai-gateway.validateStore" -}}
{{- $s := .Values.responsesStore }}
{{- if $s.enabled }}
{{- if and $s.url $s.existingSecret }}
{{- fail "responsesStore: set responsesStore.url or responsesStore.existingSecret, not both" }}
{{- end }}
{{- if or (regexMatch "^[a-zA-Z]+://[^:/?#@]*:[^@/?#]*@" $s.url) (regexMatch "(?i)[?&]password=" $s.url) }}
{{- fail "responsesStore.url carries a password, which would land in the ConfigMap and the release history: put the URL in a Secret and set responsesStore.existingSecret (and secretKey)" }}
{{- end }}
{{- if include "triton-openai-gateway.storeSqlite" . }}
{{- $url := include "triton-openai-gateway.storeUrl" . }}
{{- $dir := trimSuffix "/" $s.persistence.mountPath }}
{{- if or (not (hasPrefix (printf "sqlite:///%s/" $dir) $url)) (contains "/../" $url) }}
{{- fail (printf "responsesStore.url %q must name a file under responsesStore.persistence.mountPath (%s), the only writable place (the root filesystem is read-only): sqlite:///%s/responses.db" $url $dir $dir) }}
{{- end }}
{{- if include "triton-openai-gateway.severalPods" . }}
{{- fail "responsesStore: several gateway pods (gateway.replicaCount > 1 or autoscaling.enabled) cannot share a SQLite responses store: each pod would keep its own file, and a request with previous_response_id landing on another pod would not find the conversation. Put a postgresql:// URL in a Secret and set responsesStore.existingSecret, or set responsesStore.enabled=false, or run one pod (gateway.replicaCount=1, autoscaling.enabled=false)" }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
