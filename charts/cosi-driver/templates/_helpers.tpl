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

{{/*
The driver name to pass with driver.nameFlag, or "" for none. Each release needs its own (the
sidecars' Lease is named after it): driver.name is required unless the release is "s3", the one
docs/install.md and config/driver/s3 install, which keeps the driver's default name.
*/}}
{{- define "cosi-driver.driverName" -}}
{{- if .Values.driver.nameFlag -}}
{{- if .Values.driver.name -}}
{{- .Values.driver.name -}}
{{- else if ne .Release.Name "s3" -}}
{{- fail (printf "driver.name is required for release %q: each driver release needs its own driver name (its sidecars' Lease is named after it), e.g. --set driver.name=%s.s3.example.com; classes name it as their driverName" .Release.Name .Release.Name) -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/*
The sidecars' leader election Lease: <driver name, lower-case>-cosi-sidecar (sidecar.LeaseName).
The driver's name is driver.name, or the S3 driver's default for the release "s3" of the
project's S3 image; "" when the chart cannot know it (then the sidecar's Role is not limited to it).
*/}}
{{- define "cosi-driver.leaseName" -}}
{{- $name := .Values.driver.name -}}
{{- if and (not $name) (eq .Release.Name "s3") (eq .Values.driver.imageName "cosi-driver-s3") (not .Values.driver.image) -}}
{{- $name = "s3.cosi.kube-cosi.io" -}}
{{- end -}}
{{- if $name -}}
{{- lower $name -}}-cosi-sidecar
{{- end -}}
{{- end }}
