{{/* Name of the chart, overridable. */}}
{{- define "stampede.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Prefix of every resource name: <release>-<chart>, or just the release if it already says stampede. */}}
{{- define "stampede.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Component names (kept within 63 characters). */}}
{{- define "stampede.controller.fullname" -}}
{{- printf "%s-controller" (include "stampede.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- define "stampede.agent.fullname" -}}
{{- printf "%s-agent" (include "stampede.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "stampede.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "stampede.labels" -}}
helm.sh/chart: {{ include "stampede.chart" . }}
app.kubernetes.io/name: {{ include "stampede.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: stampede
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component: (dict "ctx" $ "component" "controller"). */}}
{{- define "stampede.selectorLabels" -}}
app.kubernetes.io/name: {{ include "stampede.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* All labels of one component's objects. */}}
{{- define "stampede.componentLabels" -}}
{{ include "stampede.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "stampede.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag | toString) -}}
{{- end -}}

{{- define "stampede.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "stampede.controller.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the token, and its key. */}}
{{- define "stampede.secretName" -}}
{{- if .Values.auth.existingSecret -}}
{{- .Values.auth.existingSecret -}}
{{- else -}}
{{- printf "%s-token" (include "stampede.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* In-cluster URL of the controller, for agents. */}}
{{- define "stampede.controller.url" -}}
{{- printf "http://%s.%s.svc:%d" (include "stampede.controller.fullname" .) .Release.Namespace (int .Values.controller.service.port) -}}
{{- end -}}

{{/* Env shared by every Stampede container: log format. */}}
{{- define "stampede.commonEnv" -}}
- name: STAMPEDE_LOG_FORMAT
  value: {{ .Values.logFormat | quote }}
{{- end -}}

{{/* Env for controller and agents: the shared token. */}}
{{- define "stampede.tokenEnv" -}}
- name: STAMPEDE_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "stampede.secretName" . }}
      key: {{ .Values.auth.secretKey }}
{{- end -}}

{{/* Pod-level settings of every pod: image pull secrets, no API token unless asked, the security context. */}}
{{- define "stampede.podSecurityContext" -}}
{{- toYaml .Values.podSecurityContext -}}
{{- end -}}


{{/* A writable /tmp: the root filesystem is read-only. */}}
{{- define "stampede.tmpVolume" -}}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- end -}}
{{- define "stampede.tmpMount" -}}
- name: tmp
  mountPath: /tmp
{{- end -}}
