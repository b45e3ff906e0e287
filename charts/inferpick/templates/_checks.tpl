{{/*
Failure mode of the pool: the value when set, else the mode of the pool
already in the cluster (a release upgraded over an existing pool keeps it),
else FailOpen.
*/}}
{{- define "inferpick.failureMode" -}}
{{- $mode := .Values.pool.failureMode }}
{{- if not $mode }}
{{- $pool := lookup "inference.networking.k8s.io/v1" "InferencePool" .Release.Namespace (include "inferpick.poolName" .) }}
{{- with $pool }}{{ with .spec }}{{ with .endpointPickerRef }}{{ $mode = .failureMode }}{{ end }}{{ end }}{{ end }}
{{- end }}
{{- default "FailOpen" $mode }}
{{- end }}

{{/*
What a Kubernetes int-or-percent value counts out of a total: the number,
or the percentage of the total rounded as the controller reading it rounds
(a Deployment's maxUnavailable down, a disruption budget's values up).
Takes (dict "value" 1 "total" 3 "roundUp" true).
*/}}
{{- define "inferpick.scaledValue" -}}
{{- $v := toString .value }}
{{- if hasSuffix "%" $v }}
{{- $scaled := mul .total (atoi (trimSuffix "%" $v)) }}
{{- if .roundUp }}{{ div (add $scaled 99) 100 }}{{ else }}{{ div $scaled 100 }}{{ end }}
{{- else }}
{{- int .value }}
{{- end }}
{{- end }}

{{/*
Fails the render on a strategy whose rollout cannot finish. Under leader
election only the leader is ready, and a new pod is a standby until the old
leader is gone: a rolling update that keeps any old pod available keeps the
leader, and waits forever for new standbys to become ready. It must be
allowed to take every pod down (maxUnavailable >= replicas).
*/}}
{{- define "inferpick.checkStrategy" -}}
{{- $s := .Values.strategy }}
{{- if and $s (include "inferpick.leaderElection" .) (eq .Values.haMode "active-passive") (ne (toString $s.type) "Recreate") }}
{{- $replicas := int .Values.replicas }}
{{- $max := dig "rollingUpdate" "maxUnavailable" "25%" $s }}
{{- $n := int (include "inferpick.scaledValue" (dict "value" $max "total" $replicas "roundUp" false)) }}
{{- if lt $n $replicas }}
{{- fail (printf "strategy: with %d replicas in active-passive mode only the leader is ready; a RollingUpdate with maxUnavailable %v never finishes, as it keeps the old leader. Leave strategy empty (Recreate) or set rollingUpdate.maxUnavailable to at least %d (100%%)." $replicas $max $replicas) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Name of the Secret holding the token scrapers present to the metrics port,
when a scrape object (ServiceMonitor, GKE PodMonitoring) is rendered and
metrics.auth is on; empty otherwise.
*/}}
{{- define "inferpick.scrapeTokenSecret" -}}
{{- $gmp := and (eq .Values.provider.name "gke") .Values.provider.gke.podMonitoring }}
{{- if and .Values.metrics.auth (or .Values.metrics.serviceMonitor.enabled $gmp) }}
{{- default (printf "%s-metrics-reader" (include "inferpick.fullname" .)) .Values.metrics.serviceMonitor.tokenSecret }}
{{- end }}
{{- end }}

{{/*
Milliseconds of a Gateway API duration (1h2m3s, 300s, 500ms); divided by
1000, its whole seconds.
*/}}
{{- define "inferpick.durationMillis" -}}
{{- $total := 0 }}
{{- range regexFindAll "[0-9]+(ms|h|m|s)" . -1 }}
{{- $v := int (regexFind "^[0-9]+" .) }}
{{- if hasSuffix "ms" . }}{{ $total = add $total $v }}
{{- else if hasSuffix "h" . }}{{ $total = add $total (mul $v 3600000) }}
{{- else if hasSuffix "m" . }}{{ $total = add $total (mul $v 60000) }}
{{- else }}{{ $total = add $total (mul $v 1000) }}{{ end }}
{{- end }}
{{- $total }}
{{- end }}

{{/*
Timeout of a scrape of the picker: metrics.serviceMonitor.scrapeTimeout, or
the interval when that is shorter. Prometheus refuses a scrape whose timeout
is longer than its interval, and with it every target of the object.
*/}}
{{- define "inferpick.scrapeTimeout" -}}
{{- $sm := .Values.metrics.serviceMonitor }}
{{- if gt (int (include "inferpick.durationMillis" $sm.scrapeTimeout)) (int (include "inferpick.durationMillis" $sm.interval)) }}
{{- $sm.interval }}
{{- else }}
{{- $sm.scrapeTimeout }}
{{- end }}
{{- end }}

{{/*
Fails the render on a PodDisruptionBudget that lets no ready picker be
evicted (maxUnavailable 0, or minAvailable of every ready replica,
percentages rounded up as the disruption controller rounds them): it would
hold every drain of a picker's node until someone deletes the pod. Under
active-passive only the leader is ready, so the controller allows an
eviction only while the budget lets every other replica be unavailable.
*/}}
{{- define "inferpick.checkDisruptionBudget" -}}
{{- $pdb := .Values.podDisruptionBudget }}
{{- $replicas := int .Values.replicas }}
{{- $passive := and (eq (include "inferpick.leaderElection" .) "true") (eq .Values.haMode "active-passive") }}
{{- $ready := ternary 1 $replicas $passive }}
{{- $max := $pdb.maxUnavailable }}
{{- $useMax := and (not (kindIs "invalid" $max)) (ne (toString $max) "") }}
{{- $value := ternary $max $pdb.minAvailable $useMax }}
{{- $n := int (include "inferpick.scaledValue" (dict "value" $value "total" $replicas "roundUp" true)) }}
{{- /* Evictions allowed: the ready pods above the healthy count wanted. */}}
{{- $wanted := ternary (sub $replicas $n) $n $useMax }}
{{- if le $ready (int $wanted) }}
{{- $setting := printf "%s %v" (ternary "maxUnavailable" "minAvailable" $useMax) $value }}
{{- if $passive }}
{{- fail (printf "podDisruptionBudget: in active-passive mode only the leader of the %d replicas is ready, and %s keeps it from eviction, so a drain of the leader's node waits until someone deletes the pod. Use haMode active-active, or leave podDisruptionBudget off (unready standbys are always evictable)." $replicas $setting) }}
{{- else if $useMax }}
{{- fail (printf "podDisruptionBudget: %s lets no picker be evicted, so a node drain waits until someone deletes the pod. Set it to at least 1." $setting) }}
{{- else }}
{{- fail (printf "podDisruptionBudget: with %d replica%s, %s lets no picker be evicted, so a node drain waits until someone deletes the pod. Set replicas above %d, or a lower minAvailable." $replicas (ternary "" "s" (eq $replicas 1)) $setting $n) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Fails the render on picker.extraArgs that set a flag the chart sets from
its own values: the probes, the Service, the RBAC and the grace period
follow the chart's value, and the extra one, coming last, would win. A
flag rendered from a value of picker (the policy, the verbosity, the KV
events when on) fails the same way, naming the value to set.
*/}}
{{- define "inferpick.checkExtraArgs" -}}
{{- $owned := dict
  "pool-name" "from pool.name"
  "pool-namespace" "to the release namespace, where its Role is"
  "pool-group" "to inference.networking.k8s.io"
  "config-file" "to the ConfigMap of picker.config"
  "grpc-port" "to 9002, the Service's target (service.grpcPort is the Service's port)"
  "grpc-health-port" "to 9003, where the probes ask"
  "metrics-port" "to 9090, the Service's target (service.metricsPort is the Service's port)"
  "secure-serving" "from tls.enabled"
  "cert-path" "from tls.secretName"
  "client-ca-path" "from tls.clientCASecretName"
  "metrics-endpoint-auth" "from metrics.auth"
  "metrics-secure-serving" "from metrics.secureServing"
  "ha-enable-leader-election" "from replicas (on when more than 1)"
  "ha-mode" "from haMode"
  "drain-timeout" "from picker.drainTimeoutSeconds, with the grace period"
}}
{{- /* The flags the deployment renders from a value of picker, each under
the conditions it renders it: the value to set instead. */}}
{{- $p := .Values.picker }}
{{- $valued := dict
  "fallbacks" "picker.fallbacks"
  "grpc-keepalive-time" "picker.keepalive.time"
  "grpc-keepalive-timeout" "picker.keepalive.timeout"
  "refresh-metrics-interval" "picker.refreshMetricsInterval"
  "metrics-staleness-threshold" "picker.metricsStalenessThreshold"
  "model-server-metrics-path" "picker.modelServerMetrics.path"
  "model-server-type" "picker.modelServerType"
  "v" "picker.verbosity"
}}
{{- if $p.policy }}{{ $_ := set $valued "policy" "picker.policy" }}{{ end }}
{{- if gt (int64 $p.maxRequestBodyBytes) 0 }}{{ $_ := set $valued "max-request-body-bytes" "picker.maxRequestBodyBytes" }}{{ end }}
{{- if gt (int64 $p.maxBufferedBodyBytes) 0 }}{{ $_ := set $valued "max-buffered-body-bytes" "picker.maxBufferedBodyBytes" }}{{ end }}
{{- if $p.modelServerMetrics.port }}{{ $_ := set $valued "model-server-metrics-port" "picker.modelServerMetrics.port" }}{{ end }}
{{- with $p.kvEvents }}
{{- if or (gt (int64 .port) 0) (gt (int64 .listenPort) 0) }}
{{- $_ := set $valued "kv-events-offload-weight" "picker.kvEvents.offloadWeight" }}
{{- $_ := set $valued "tokenize-timeout" "picker.kvEvents.tokenizeTimeout" }}
{{- if gt (int64 .port) 0 }}{{ $_ := set $valued "kv-events-port" "picker.kvEvents.port" }}{{ end }}
{{- if gt (int64 .listenPort) 0 }}{{ $_ := set $valued "kv-events-listen" "picker.kvEvents.listenPort" }}{{ end }}
{{- if .topic }}{{ $_ := set $valued "kv-events-topic" "picker.kvEvents.topic" }}{{ end }}
{{- if gt (int64 .replayPort) 0 }}
{{- $_ := set $valued "kv-events-replay-port" "picker.kvEvents.replayPort" }}
{{- $_ := set $valued "kv-events-replay-timeout" "picker.kvEvents.replayTimeout" }}
{{- end }}
{{- end }}
{{- end }}
{{- if $p.flowControl.enabled }}
{{- range $flag, $value := dict "flow-control" "enabled" "flow-control-max-requests" "maxRequests" "flow-control-max-band-requests" "maxBandRequests" "flow-control-max-bytes" "maxBytes" "flow-control-max-wait" "maxWait" "flow-control-reserved-slots" "reservedSlots" "flow-control-ordering" "ordering" }}
{{- $_ := set $valued $flag (printf "picker.flowControl.%s" $value) }}
{{- end }}
{{- end }}
{{- range .Values.picker.extraArgs }}
{{- $flag := regexReplaceAll "=.*$" (trimPrefix "-" (trimPrefix "-" .)) "" }}
{{- with get $owned $flag }}
{{- fail (printf "picker.extraArgs: the chart sets --%s %s; a second value would win over it, while the objects the chart wires to it keep the first." $flag .) }}
{{- end }}
{{- with get $valued $flag }}
{{- fail (printf "picker.extraArgs: the chart sets --%s from %s, and a second --%s would silently win over it (the last of a flag is the one the picker takes). Set %s instead." $flag . $flag .) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Fails the render on a Service name starting with a digit (a release named
8b-llama) on Kubernetes before 1.36: until then the API server takes a
Service name only as a DNS-1035 label, which starts with a letter, and the
install would fail on the Service after creating the rest.
*/}}
{{- define "inferpick.checkServiceName" -}}
{{- $name := include "inferpick.fullname" . }}
{{- if and (not (regexMatch "^[a-z]" $name)) (semverCompare "<1.36.0-0" .Capabilities.KubeVersion.Version) }}
{{- fail (printf "the picker's Service would be named %s, and Kubernetes before 1.36 (this cluster is %s) refuses a Service name that does not start with a letter. Set fullnameOverride to a name that does (e.g. inferpick-%s), or install under a release name that does." $name .Capabilities.KubeVersion.Version (.Release.Name | replace "." "-")) }}
{{- end }}
{{- end }}

{{/*
Fails the render on request-body bounds the picker refuses at start: the
buffer for all streams (--max-buffered-body-bytes) must hold one largest
body (--max-request-body-bytes). 0 keeps the picker's default of each,
16 MiB and 256 MiB.
*/}}
{{- define "inferpick.checkBodyBudgets" -}}
{{- $p := .Values.picker }}
{{- $body := int64 $p.maxRequestBodyBytes }}
{{- $buffered := int64 $p.maxBufferedBodyBytes }}
{{- $effBody := ternary $body 16777216 (gt $body 0) }}
{{- $effBuffered := ternary $buffered 268435456 (gt $buffered 0) }}
{{- if lt (int64 $effBuffered) (int64 $effBody) }}
{{- $bufferedText := ternary (printf "%d" $buffered) (printf "0 (the picker's %d)" $effBuffered) (gt $buffered 0) }}
{{- $bodyText := ternary (printf "%d" $body) (printf "0 (the picker's %d)" $effBody) (gt $body 0) }}
{{- fail (printf "picker.maxBufferedBodyBytes %s is under picker.maxRequestBodyBytes %s: the buffer for all streams must hold one largest body, and the picker refuses to start. Raise picker.maxBufferedBodyBytes to at least %d, or lower picker.maxRequestBodyBytes." $bufferedText $bodyText $effBody) }}
{{- end }}
{{- end }}

{{/*
Fails the render on a KV-events listen port the picker's container already
uses: the ext_proc (9002), health (9003) or metrics (9090) port, where the
picker would fail to listen at start.
*/}}
{{- define "inferpick.checkKVEventsPort" -}}
{{- $port := int64 .Values.picker.kvEvents.listenPort }}
{{- range $name, $used := dict "ext_proc" 9002 "health" 9003 "metrics" 9090 }}
{{- if eq $port (int64 $used) }}
{{- fail (printf "picker.kvEvents.listenPort: %d is the picker's %s port. Choose another port (5557 is vLLM's default)." $port $name) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Fails the render on tls.secretName with tls.enabled false: the picker then
serves ext_proc in plaintext and the Secret would be left unmounted and
unused, while whoever set it expects the gateway to see that certificate.
*/}}
{{- define "inferpick.checkTLS" -}}
{{- if and .Values.tls.secretName (not .Values.tls.enabled) }}
{{- fail (printf "tls.secretName %s is set with tls.enabled false: ext_proc is then served in plaintext and the Secret is not used. Set tls.enabled true to serve with it, or leave tls.secretName empty." .Values.tls.secretName) }}
{{- end }}
{{- end }}
