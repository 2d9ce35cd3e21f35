{{/*
Names: the release name is the prefix, as namePrefix in config/driver/s3 ("s3" there):
<release>-cosi-driver (Deployment, ServiceAccount, ...) and <release>-cosi-sidecar (roles).
*/}}
{{- define "cosi-driver.name" -}}
{{- printf "%s-cosi-driver" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end }}
{{- define "cosi-driver.roleName" -}}
{{- printf "%s-cosi-sidecar" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{/*
Labels of every object. app.kubernetes.io/part-of is the one config/driver/s3 sets too; the
others say that Helm manages the object (test/install ignores them when it compares).
*/}}
{{- define "cosi-driver.labels" -}}
app.kubernetes.io/part-of: cosi
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ include "cosi-driver.tag" . | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | quote }}
{{- end }}

{{/* The selector of the Pods. */}}
{{- define "cosi-driver.selectorLabels" -}}
app.kubernetes.io/name: cosi-driver
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "cosi-driver.componentLabels" -}}
{{ include "cosi-driver.selectorLabels" . }}
app.kubernetes.io/component: driver
{{- end }}

{{- define "cosi-driver.tag" -}}
{{- .Values.image.tag | default .Chart.AppVersion -}}
{{- end }}

{{/* The socket both containers share, as $COSI_ENDPOINT. */}}
{{- define "cosi-driver.endpoint" -}}
unix://{{ .Values.socketDir }}/driver.sock
{{- end }}
