{{/*
Labels of every object. app.kubernetes.io/part-of is the one config/default sets too; the others
say that Helm manages the object (test/install ignores them when it compares with kustomize).
*/}}
{{- define "cosi.labels" -}}
app.kubernetes.io/part-of: cosi
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ include "cosi.tag" . | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | quote }}
{{- end }}

{{/* Labels of the controller's objects; the first is the Pods' selector. */}}
{{- define "cosi.controllerLabels" -}}
app.kubernetes.io/name: cosi-controller
app.kubernetes.io/component: controller
{{- end }}

{{- define "cosi.tag" -}}
{{- .Values.image.tag | default .Chart.AppVersion -}}
{{- end }}

{{/*
The objects of a file of config/ (files/ links there), one YAML document each, with the chart's
labels added; an object that names a namespace (the generated Roles name cosi-system) is put into
the release's namespace instead. Argument: list of the root context, the file's path and,
optionally, annotations to add.
*/}}
{{- define "cosi.objectsFromFile" -}}
{{- $root := index . 0 -}}
{{- $annotations := dict -}}
{{- if gt (len .) 2 }}{{ $annotations = index . 2 }}{{ end -}}
{{- range $doc := regexSplit "(?m)^---[ \t]*$" ($root.Files.Get (index . 1)) -1 }}
{{- $obj := fromYaml $doc }}
{{- if $obj.kind }}
{{- $labels := merge (include "cosi.labels" $root | fromYaml) ($obj.metadata.labels | default dict) }}
{{- $_ := set $obj.metadata "labels" $labels }}
{{- if $annotations }}
{{- $_ := set $obj.metadata "annotations" (merge (deepCopy $annotations) ($obj.metadata.annotations | default dict)) }}
{{- end }}
{{- if $obj.metadata.namespace }}
{{- $_ := set $obj.metadata "namespace" $root.Release.Namespace }}
{{- end }}
---
{{ toYaml $obj }}
{{- end }}
{{- end }}
{{- end }}
