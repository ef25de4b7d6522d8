{{/*
The alert rules, as the body of a Prometheus rules file ("groups: ..."). The PrometheusRule's spec
(templates/prometheusrule.yaml) is this text, and so is the plain rules file for a Prometheus
without the operator (deploy/prometheus/triton-openai-gateway.rules.yaml, cut out of the rendered
PrometheusRule by scripts/render-alert-rules.py): one source, so the two cannot disagree.

Every expression selects series with gateway.metrics.prometheusRule.selector, so two releases
scraped by one Prometheus never alert on each other's series. Aggregations keep namespace and job
(absent outside Kubernetes, which PromQL treats as empty), so an alert still names its release.
Alert texts are Prometheus templates ({{ $labels.x }}, {{ $value }}): they are written as Go raw
strings, which Helm passes through as data.
*/}}

{{/* The PromQL matchers of the release's targets: the value, or the ServiceMonitor's job and namespace. */}}
{{- define "triton-openai-gateway.alertSelector" -}}
{{- $pr := .Values.gateway.metrics.prometheusRule }}
{{- default (printf `job="%s", namespace="%s"` (include "triton-openai-gateway.fullname" .) .Release.Namespace) $pr.selector }}
{{- end }}

{{/*
An alert text as a folded YAML block's lines: wrapped at 92 columns, never inside a Prometheus
template action ({{ $labels.x }}), so the file reads well; YAML's folding joins the lines with the
single spaces the wrap took out, and Prometheus sees the text as written.
*/}}
{{- define "triton-openai-gateway.foldText" -}}
{{- $t := . }}
{{- range regexFindAll "\\{\\{[^}]*\\}\\}" $t -1 }}
{{- $t = replace . (replace " " "\x1f" .) $t }}
{{- end }}
{{- wrap 92 $t | replace "\x1f" " " }}
{{- end }}

{{/*
One alerting rule, from a dict: root (the chart's context), alert (its values: for, severity),
name, expr, summary, description.
*/}}
{{- define "triton-openai-gateway.alertRule" -}}
{{- $pr := .root.Values.gateway.metrics.prometheusRule -}}
- alert: {{ .name }}
  expr: |-
    {{- .expr | nindent 4 }}
  for: {{ .alert.for }}
  labels:
    severity: {{ .alert.severity }}
    {{- with $pr.alertLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    summary: >-
      {{- include "triton-openai-gateway.foldText" .summary | nindent 6 }}
    description: >-
      {{- include "triton-openai-gateway.foldText" .description | nindent 6 }}
    runbook_url: {{ printf "%s#%s" $pr.runbookBaseUrl (lower .name) | quote }}
{{- end }}

{{/*
Whether the target is down or gone, whether it is ready, whether its Triton replicas are in
rotation, and whether the streams a failed replica was generating went on elsewhere.
*/}}
{{- define "triton-openai-gateway.availabilityAlerts" -}}
{{- $pr := .Values.gateway.metrics.prometheusRule }}
{{- $s := include "triton-openai-gateway.alertSelector" . }}
{{- $w := $pr.rateWindow }}
{{- $alerts := $pr.alerts }}
{{- with $alerts.gatewayDown }}{{ if .enabled }}
{{ include "triton-openai-gateway.alertRule" (dict "root" $ "alert" . "name" "GatewayDown"
  "expr" (printf `up{%s, endpoint!="triton-metrics"} == 0` $s)
  "summary" `Gateway target {{ $labels.instance }} is down`
  "description" `Prometheus cannot scrape the gateway at {{ $labels.instance }} (job {{ $labels.job }}{{ with $labels.pod }}, pod {{ . }}{{ end }}): the process is gone or hung, or its metrics port is unreachable. Clients that reach it get errors until it is restarted or replaced.`) }}
{{- end }}{{ end }}
{{- with $alerts.gatewayAbsent }}{{ if .enabled }}
{{ include "triton-openai-gateway.alertRule" (dict "root" $ "alert" . "name" "GatewayAbsent"
  "expr" (printf `absent(up{%s, endpoint!="triton-metrics"})` $s)
  "summary" `No gateway target of job {{ $labels.job }} in Prometheus`
  "description" `Prometheus has no gateway target of job {{ $labels.job }}{{ with $labels.namespace }} in namespace {{ . }}{{ end }}: every gateway pod is gone, or Prometheus no longer discovers them (the ServiceMonitor deleted or not selected by Prometheus, the Service changed). No other gateway alert can fire while this one does.`) }}
{{- end }}{{ end }}
{{- with $alerts.gatewayNotReady }}{{ if .enabled }}
{{ include "triton-openai-gateway.alertRule" (dict "root" $ "alert" . "name" "GatewayNotReady"
  "expr" (printf `gateway_ready{%s} == 0` $s)
  "summary" `Gateway {{ $labels.instance }} is not ready`
  "description" `The readiness check of the gateway at {{ $labels.instance }}{{ with $labels.pod }} (pod {{ . }}){{ end }} keeps failing (gateway_ready 0): it is draining, or Triton is unreachable, not ready or serving no ready model. Kubernetes sends it no new traffic; when every pod is in this state, the Service has no endpoint left and clients are refused before they reach a gateway.`) }}
{{- end }}{{ end }}
{{- with $alerts.replicaOutOfPool }}{{ if .enabled }}
{{ include "triton-openai-gateway.alertRule" (dict "root" $ "alert" . "name" "ReplicaOutOfPool"
  "expr" (printf `gateway_replica_up{%s} == 0` $s)
  "summary" `Triton replica {{ $labels.replica }} is out of rotation on {{ $labels.instance }}`
  "description" `The gateway at {{ $labels.instance }}{{ with $labels.pod }} (pod {{ . }}){{ end }} keeps Triton replica {{ $labels.replica }} out of rotation (gateway_replica_up 0): its probes find it unreachable, not ready, or unable to list its models. The other replicas take its requests, with less capacity between them.`) }}
{{- end }}{{ end }}
{{- with $alerts.streamsLost }}{{ if .enabled }}
{{ include "triton-openai-gateway.alertRule" (dict "root" $ "alert" . "name" "StreamsLost"
  "expr" (printf "sum by (namespace, job, replica, outcome) (\n  rate(gateway_stream_migrations_total{%s, outcome=~\"failed|not_continuable\"}[%s])\n)\n> %v" $s $w .threshold)
  "summary" `Streams lost when Triton replica {{ $labels.replica }} failed ({{ $labels.outcome }})`
  "description" `Streams that Triton replica {{ $labels.replica }} was generating when it failed mid-stream (killed, drained past its grace, its connection lost) did not go on on another replica, at {{ $value | printf "%.3g" }}/s (job {{ $labels.job }}): their clients got an error event after part of the answer. Outcome {{ $labels.outcome }} (failed: no other replica in rotation could take the stream, or it refused the continuation; not_continuable: the stream had already moved GATEWAY_MIGRATION_LIMIT times, its deadline had passed, or its model could not build the continuation).`) }}
{{- end }}{{ end }}
{{- end }}

{{/* What clients see: a full queue, refusals, 5xx, slow first tokens, and a KV cache full behind them. */}}
{{- define "triton-openai-gateway.trafficAlerts" -}}
{{- $pr := .Values.gateway.metrics.prometheusRule }}
{{- $s := include "triton-openai-gateway.alertSelector" . }}
{{- $w := $pr.rateWindow }}
{{- $alerts := $pr.alerts }}
{{- with $alerts.queueFull }}{{ if .enabled }}
{{ include "triton-openai-gateway.alertRule" (dict "root" $ "alert" . "name" "QueueFull"
  "expr" (printf "gateway_requests_waiting{%s}\n  / (gateway_requests_waiting_limit{%s} > 0)\n>= %v" $s $s .ratio)
  "summary" `Queue of model {{ $labels.model }} on {{ $labels.instance }} is {{ $value | humanizePercentage }} full`
  "description" `Requests waiting for a slot of model {{ $labels.model }} on the gateway at {{ $labels.instance }} fill {{ $value | humanizePercentage }} of its queue (gateway_requests_waiting over gateway_requests_waiting_limit): Triton does not finish requests as fast as they come. A full queue answers 429 queue_full.`) }}
{{- end }}{{ end }}
{{- with $alerts.requestsShed }}{{ if .enabled }}
{{- $m := $s }}
{{- with .ignoredReasons }}{{ $m = printf `%s, reason!~"%s"` $s (join "|" .) }}{{ end }}
{{ include "triton-openai-gateway.alertRule" (dict "root" $ "alert" . "name" "RequestsShed"
  "expr" (printf "sum by (namespace, job, model, reason) (rate(gateway_requests_shed_total{%s}[%s]))\n> %v" $m $w .threshold)
  "summary" `Model {{ $labels.model }}: {{ $value | printf "%.3g" }} requests/s refused ({{ $labels.reason }})`
  "description" `The gateway's scheduler (job {{ $labels.job }}) refuses {{ $value | printf "%.3g" }} requests/s of model {{ $labels.model }} with 429 before they reach Triton, for reason {{ $labels.reason }} (queue_full: the queue is full; timeout: no slot within the queue timeout; deadline: the request's deadline is nearer than the queue ahead; sheddable: a sheddable request found no slot free to it; displaced: a waiter gave its place to another key's request).`) }}
{{- end }}{{ end }}
{{- with $alerts.highErrorRatio }}{{ if .enabled }}
{{- $by := ternary "namespace, job, model" "namespace, job" .perModel }}
{{ include "triton-openai-gateway.alertRule" (dict "root" $ "alert" . "name" "HighErrorRatio"
  "expr" (printf "sum by (%s) (rate(gateway_requests_total{%s, status=~\"5..\"}[%s]))\n  / (sum by (%s) (rate(gateway_requests_total{%s}[%s])) > %v)\n> %v" $by $s $w $by $s $w .minRequestRate .threshold)
  "summary" (ternary `{{ $value | humanizePercentage }} of model {{ $labels.model }}'s requests fail with 5xx` `{{ $value | humanizePercentage }} of the gateway's requests fail with 5xx` .perModel)
  "description" (ternary `{{ $value | humanizePercentage }} of the requests for model {{ $labels.model }} (job {{ $labels.job }}) end in a 5xx: Triton errors or timeouts, replicas failing, or the gateway not ready. gateway_backend_errors_total by type says which.` `{{ $value | humanizePercentage }} of the requests to the gateway (job {{ $labels.job }}) end in a 5xx: Triton errors or timeouts, replicas failing, or the gateway not ready. gateway_backend_errors_total by type says which.` .perModel)) }}
{{- end }}{{ end }}
{{- with $alerts.highTimeToFirstToken }}{{ if .enabled }}
{{- $p := printf "p%v" (round (mulf .quantile 100) 3) }}
{{ include "triton-openai-gateway.alertRule" (dict "root" $ "alert" . "name" "HighTimeToFirstToken"
  "expr" (printf "histogram_quantile(%v,\n  sum by (namespace, job, model, le) (rate(gateway_time_to_first_token_seconds_bucket{%s}[%s]))\n)\n> %v" .quantile $s $w .threshold)
  "summary" (printf `Model {{ $labels.model }}: %s time to first token is {{ $value | humanizeDuration }}` $p)
  "description" (printf `The %s time from a request's arrival to its first generated text, for model {{ $labels.model }} (job {{ $labels.job }}), is {{ $value | humanizeDuration }}, over %vs: requests wait for a gateway slot or in Triton's queue, or the prompts' prefill is slow.` $p .threshold)) }}
{{- end }}{{ end }}
{{- with $alerts.engineKVCacheSaturated }}{{ if .enabled }}
{{ include "triton-openai-gateway.alertRule" (dict "root" $ "alert" . "name" "EngineKVCacheSaturated"
  "expr" (printf "max by (namespace, job, replica, model) (gateway_replica_kv_cache_usage{%s})\n>= %v" $s .ratio)
  "summary" `KV cache of model {{ $labels.model }} on Triton replica {{ $labels.replica }} is {{ $value | humanizePercentage }} full`
  "description" `The engine of model {{ $labels.model }} on Triton replica {{ $labels.replica }} (job {{ $labels.job }}) has {{ $value | humanizePercentage }} of its KV cache in use (gateway_replica_kv_cache_usage: the most any gateway pod read; each reads the same engine): it has no room for more sequences, so it queues new requests or preempts running ones, and time to first token and inter-token latency rise.`) }}
{{- end }}{{ end }}
{{- end }}

{{/* The API keys' limits: a key refused for long, a store of counts that does not answer. */}}
{{- define "triton-openai-gateway.keyAlerts" -}}
{{- $pr := .Values.gateway.metrics.prometheusRule }}
{{- $s := include "triton-openai-gateway.alertSelector" . }}
{{- $w := $pr.rateWindow }}
{{- $alerts := $pr.alerts }}
{{- with $alerts.keyThrottled }}{{ if .enabled }}
{{ include "triton-openai-gateway.alertRule" (dict "root" $ "alert" . "name" "KeyThrottled"
  "expr" (printf "sum by (namespace, job, key, limit) (rate(gateway_key_rate_limited_total{%s}[%s]))\n> %v" $s $w .threshold)
  "summary" `API key {{ $labels.key }} is refused by its {{ $labels.limit }} limit`
  "description" `Requests of API key {{ $labels.key }} (job {{ $labels.job }}) get 429 from the key's {{ $labels.limit }} limit at {{ $value | printf "%.3g" }}/s, and have for long: its client sends more than the key's policy allows.`) }}
{{- end }}{{ end }}
{{- with $alerts.keyLimitsStoreFailing }}{{ if .enabled }}
{{ include "triton-openai-gateway.alertRule" (dict "root" $ "alert" . "name" "KeyLimitsStoreFailing"
  "expr" (printf "rate(gateway_key_limits_failures_total{%s}[%s]) > %v" $s $w .threshold)
  "summary" `The key limits' store fails on {{ $labels.instance }} ({{ $labels.step }})`
  "description" `The gateway at {{ $labels.instance }}{{ with $labels.pod }} (pod {{ . }}){{ end }} fails the {{ $labels.step }} step against the store of its API keys' limits ({{ $value | printf "%.3g" }}/s): Redis (GATEWAY_KEY_LIMITS_REDIS_URL) unreachable or slower than its timeout, or without Redis the workers' SQLite file busy or broken. An admission that cannot count fails open by default (GATEWAY_KEY_LIMITS_REDIS_FAILURE=open: named keys' requests pass uncounted, no limit enforced) or, with closed, answers 503 rate_limiter_unavailable.`) }}
{{- end }}{{ end }}
{{- end }}

{{/* The rules file's body: the groups that have an enabled alert, then prometheusRule.extraGroups. */}}
{{- define "triton-openai-gateway.alertRules" -}}
{{- $pr := .Values.gateway.metrics.prometheusRule }}
{{- $groups := list
  (list "triton-openai-gateway.availability" (include "triton-openai-gateway.availabilityAlerts" .))
  (list "triton-openai-gateway.traffic" (include "triton-openai-gateway.trafficAlerts" .))
  (list "triton-openai-gateway.keys" (include "triton-openai-gateway.keyAlerts" .)) }}
{{- $any := $pr.extraGroups }}
{{- range $groups }}{{ if trim (last .) }}{{ $any = true }}{{ end }}{{ end }}
{{- if not $any -}}
groups: []
{{- else -}}
groups:
{{- range $groups }}
{{- if trim (last .) }}
  - name: {{ first . }}
    rules:
      {{- trim (last .) | nindent 6 }}
{{- end }}
{{- end }}
{{- with $pr.extraGroups }}
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
{{- end }}
