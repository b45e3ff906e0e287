{{/*
Chart name, overridable with nameOverride.
*/}}
{{- define "inferpick.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of the picker's objects: <release>-<chart> unless the release name
already holds the chart name. Dots, which release names may hold
(llama-3.1-8b), become dashes: the Service's name is a DNS label.
*/}}
{{- define "inferpick.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | replace "." "-" | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | replace "." "-" | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | replace "." "-" | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Name of the InferencePool the picker serves.
*/}}
{{- define "inferpick.poolName" -}}
{{- default .Release.Name .Values.pool.name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Name of the ServiceAccount the picker runs as.
*/}}
{{- define "inferpick.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "inferpick.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Name of cluster-scoped objects: the release namespace keeps two releases of
the same name apart. It is not cut to 63 characters (RBAC names are not
labels): a cut could drop the part that tells two releases apart.
*/}}
{{- define "inferpick.clusterName" -}}
{{- printf "%s-%s" .Release.Namespace (include "inferpick.fullname" .) }}
{{- end }}

{{/*
Labels on every object.
*/}}
{{- define "inferpick.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "inferpick.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: inferpick
{{- end }}

{{/*
Labels that select the picker's Pods.
*/}}
{{- define "inferpick.selectorLabels" -}}
app.kubernetes.io/name: {{ include "inferpick.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/component: endpoint-picker
{{- end }}

{{/*
Container image reference; a digest wins over a tag.
*/}}
{{- define "inferpick.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
Whether leader election is on: more than one replica.
*/}}
{{- define "inferpick.leaderElection" -}}
{{- if gt (int .Values.replicas) 1 }}true{{ end }}
{{- end }}
