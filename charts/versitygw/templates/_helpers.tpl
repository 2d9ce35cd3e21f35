{{/*
The name of every object: Helm's usual fullname. The release's name when it contains the chart's
("versitygw", the documented release), else <release>-versitygw; fullnameOverride wins.
*/}}
{{- define "versitygw.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{- define "versitygw.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "versitygw.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/*
Labels of every object. No app.kubernetes.io/part-of: cosi: the store is an example to try COSI
with, not part of it.
*/}}
{{- define "versitygw.labels" -}}
{{ include "versitygw.selectorLabels" . }}
app.kubernetes.io/component: object-store
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ include "versitygw.tag" . | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | quote }}
{{- end }}

{{/* The selector of the Pod. */}}
{{- define "versitygw.selectorLabels" -}}
app.kubernetes.io/name: {{ include "versitygw.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "versitygw.tag" -}}
{{- .Values.image.tag | default .Chart.AppVersion -}}
{{- end }}

{{/* The Secret with the root key, which the admin creates: required, never made here. */}}
{{- define "versitygw.rootSecret" -}}
{{- required "rootCredentials.existingSecret is required: the name of a Secret in the release's namespace with the gateway's root key in ROOT_ACCESS_KEY_ID and ROOT_SECRET_ACCESS_KEY, which you create first (kubectl create secret generic versitygw-root --from-literal=ROOT_ACCESS_KEY_ID=... --from-literal=ROOT_SECRET_ACCESS_KEY=...); the chart never makes one" .Values.rootCredentials.existingSecret -}}
{{- end }}

{{/* The PVC of the store's volume, when persistence is on. */}}
{{- define "versitygw.claimName" -}}
{{- .Values.persistence.existingClaim | default (printf "%s-data" (include "versitygw.fullname" .)) -}}
{{- end }}

{{/* The Service's endpoints, as Pods of the cluster reach them. Argument: the root context and the port. */}}
{{- define "versitygw.endpoint" -}}
{{- $root := index . 0 -}}
http://{{ include "versitygw.fullname" $root }}.{{ $root.Release.Namespace }}.svc.{{ $root.Values.clusterDomain }}:{{ index . 1 }}
{{- end }}

{{/*
The root key from the admin's Secret, its two keys named (not envFrom: another key of the Secret
would become a variable, and versitygw reads VGW_* variables as flags). A missing key keeps the
container from starting: CreateContainerConfigError, naming the key. Argument: the Secret's name.
*/}}
{{- define "versitygw.rootEnv" -}}
- name: ROOT_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: ROOT_ACCESS_KEY_ID
- name: ROOT_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: ROOT_SECRET_ACCESS_KEY
{{- end }}

{{/*
The probes of a container: GET /healthz on its port (versitygw's --health), which answers once it
serves. Argument: the port's name.
*/}}
{{- define "versitygw.probes" -}}
readinessProbe:
  httpGet:
    path: /healthz
    port: {{ . }}
  periodSeconds: 2
livenessProbe:
  httpGet:
    path: /healthz
    port: {{ . }}
  periodSeconds: 10
  failureThreshold: 3
{{- end }}
