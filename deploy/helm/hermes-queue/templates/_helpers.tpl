{{/*
Names, labels, the image, the settings and the drain arithmetic, each defined once here and used
by every template.
*/}}

{{- define "hermes-queue.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's object name prefix (hermes-queue for a release named hermes-queue). */}}
{{- define "hermes-queue.fullname" -}}
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

{{- define "hermes-queue.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "hermes-queue.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: hermes-queue
{{- end }}

{{/* Selector labels of one component: include with (list $ "api"). */}}
{{- define "hermes-queue.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "hermes-queue.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "hermes-queue.componentLabels" -}}
{{ include "hermes-queue.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{/* The one image of every workload, the migrate hook Job included. */}}
{{- define "hermes-queue.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The Secret every process reads HERMES_QUEUE_API_KEY, _REDIS_URL and _STORE_URL from. */}}
{{- define "hermes-queue.secretName" -}}
{{- if .Values.secret.create }}
{{- include "hermes-queue.fullname" . }}
{{- else }}
{{- required "secret.existingSecret: name the Secret holding HERMES_QUEUE_API_KEY, HERMES_QUEUE_REDIS_URL and HERMES_QUEUE_STORE_URL (or set secret.create=true for a dev install)" .Values.secret.existingSecret }}
{{- end }}
{{- end }}

{{/*
Drain arithmetic (docs/deploy.md, "Install on Kubernetes"). The pod's
terminationGracePeriodSeconds covers everything that happens between the kubelet's decision to
stop a pod and its exit, so it is derived from the same values the processes are given and
cannot fall below them:
  API:    preStop sleep + listener grace + stream drain + margin
  worker: step drain + margin (no preStop: the drain starts with SIGTERM)
*/}}
{{- define "hermes-queue.api.terminationGracePeriodSeconds" -}}
{{- $d := .Values.api.drain }}
{{- add .Values.api.preStopSeconds $d.graceSeconds $d.streamSeconds $d.marginSeconds }}
{{- end }}

{{- define "hermes-queue.worker.terminationGracePeriodSeconds" -}}
{{- add .Values.worker.drain.seconds .Values.worker.drain.marginSeconds }}
{{- end }}

{{/* A setting's value as an environment string: numbers without exponents, booleans as words. */}}
{{- define "hermes-queue.envValue" -}}
{{- if kindIs "string" . }}{{ . }}{{ else }}{{ toJson . }}{{ end }}
{{- end }}

{{/*
Every non-secret setting as a dict of HERMES_QUEUE_<NAME> -> string: values.config plus what
the chart owns (ports, drain times, migrations). The ConfigMap holds it for the Deployments; the
migrate hook Job gets the same dict inline, because on a first install it runs before the
ConfigMap exists.
*/}}
{{- define "hermes-queue.settings" -}}
{{- $out := dict }}
{{- range $name, $value := .Values.config }}
{{- $_ := set $out (printf "HERMES_QUEUE_%s" (upper $name)) (include "hermes-queue.envValue" $value) }}
{{- end }}
{{- $_ := set $out "HERMES_QUEUE_PORT" (toString .Values.api.port) }}
{{- $_ := set $out "HERMES_QUEUE_METRICS_PORT" (toString .Values.worker.metricsPort) }}
{{- $_ := set $out "HERMES_QUEUE_DRAIN_GRACE_SECONDS" (toString .Values.api.drain.graceSeconds) }}
{{- $_ := set $out "HERMES_QUEUE_STREAM_DRAIN_SECONDS" (toString .Values.api.drain.streamSeconds) }}
{{- $_ := set $out "HERMES_QUEUE_DRAIN_SECONDS" (toString .Values.worker.drain.seconds) }}
{{- $_ := set $out "HERMES_QUEUE_MIGRATE_ON_START" "false" }}
{{- toYaml $out }}
{{- end }}

{{/* Pod-level security context of every workload (the image's unprivileged uid/gid). */}}
{{- define "hermes-queue.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "hermes-queue.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
{{- end }}

{{/* Settings and secrets for the Deployments' containers. */}}
{{- define "hermes-queue.envFrom" -}}
- configMapRef:
    name: {{ include "hermes-queue.fullname" . }}
- secretRef:
    name: {{ include "hermes-queue.secretName" . }}
{{- end }}

{{/* Whether a component gets a PodDisruptionBudget: more than one replica, or an autoscaler. */}}
{{- define "hermes-queue.wantsPDB" -}}
{{- if or .autoscaling.enabled (gt (int .replicas) 1) }}true{{ end }}
{{- end }}
