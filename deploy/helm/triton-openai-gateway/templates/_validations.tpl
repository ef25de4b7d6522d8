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
{{- if and (eq $t.mode "external") (not (regexMatch "^[^:/ ]+:[0-9]+$|^\\[[0-9a-fA-F:]+\\]:[0-9]+$" $t.external.url)) }}
{{- fail (printf "triton.external.url must be host:port (gRPC, no scheme), got %q" $t.external.url) }}
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
{{- end }}
