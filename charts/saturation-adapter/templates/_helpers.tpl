{{/* Chart name, overridable. */}}
{{- define "saturation-adapter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified name: the release name when it already contains the chart name. */}}
{{- define "saturation-adapter.fullname" -}}
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

{{/* Selector labels: the pods, Service, PDB and ServiceMonitor match on these. */}}
{{- define "saturation-adapter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "saturation-adapter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "saturation-adapter.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "saturation-adapter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: saturation-adapter
{{- end }}

{{- define "saturation-adapter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "saturation-adapter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The reference of an image value (dict "image" <value> "field" <its path>
"appVersion" <.Chart.AppVersion>): repository@digest, else repository:tag (tag defaults
to appVersion). A released chart sets digests (make release). */}}
{{- define "saturation-adapter.imageRef" -}}
{{- if .image.digest }}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" .image.digest) }}
{{- fail (printf "%s.digest=%q: want sha256:<64 hex digits>" .field .image.digest) }}
{{- end }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository (toString (default .appVersion .image.tag)) }}
{{- end }}
{{- end }}

{{/* The adapter's image. */}}
{{- define "saturation-adapter.image" -}}
{{- include "saturation-adapter.imageRef" (dict "image" .Values.image "field" "image" "appVersion" .Chart.AppVersion) }}
{{- end }}

{{/* The drain helper's image, for the engines' initContainers (NOTES). */}}
{{- define "saturation-adapter.drainImage" -}}
{{- include "saturation-adapter.imageRef" (dict "image" .Values.drain.image "field" "drain.image" "appVersion" .Chart.AppVersion) }}
{{- end }}

{{/* The APIServices this release registers, in order. */}}
{{- define "saturation-adapter.apiServiceNames" -}}
{{- $names := list "v1beta1.external.metrics.k8s.io" }}
{{- if .Values.customMetrics.enabled }}
{{- $names = concat $names (list "v1beta2.custom.metrics.k8s.io" "v1beta1.custom.metrics.k8s.io") }}
{{- end }}
{{- join "," $names }}
{{- end }}

{{- define "saturation-adapter.servingCertSecret" -}}
{{- default (printf "%s-serving-cert" (include "saturation-adapter.fullname" .)) .Values.tls.selfManaged.secretName }}
{{- end }}

{{/* The Secret holding tls.crt and tls.key in the certManager and secret modes. */}}
{{- define "saturation-adapter.tlsSecret" -}}
{{- if eq .Values.tls.mode "certManager" }}
{{- printf "%s-tls" (include "saturation-adapter.fullname" .) }}
{{- else if eq .Values.tls.mode "secret" }}
{{- required "tls.secret.name is required when tls.mode is secret" .Values.tls.secret.name }}
{{- end }}
{{- end }}

{{/* The Service's in-cluster DNS name, which the serving certificate must carry. */}}
{{- define "saturation-adapter.serviceHost" -}}
{{- printf "%s.%s.svc" (include "saturation-adapter.fullname" .) .Release.Namespace }}
{{- end }}

{{/*
A flag value as the adapter parses it: lists joined with commas, whole numbers without
an exponent (values files give Helm float64s: 4194304 would print as 4.194304e+06).
*/}}
{{- define "saturation-adapter.flagValue" -}}
{{- if kindIs "slice" . }}
{{- join "," . }}
{{- else if and (kindIs "float64" .) (eq (float64 (int64 .)) .) }}
{{- int64 . }}
{{- else }}
{{- toString . }}
{{- end }}
{{- end }}

{{- define "saturation-adapter.validate" -}}
{{- if and (eq .Values.tls.mode "secret") (not .Values.tls.secret.caBundle) }}
{{- fail "tls.secret.caBundle is required when tls.mode is secret: the PEM of the CA that signed the Secret's certificate" }}
{{- end }}
{{- if and (eq .Values.tls.mode "certManager") .Values.tls.certManager.issuerRef (not .Values.tls.certManager.issuerRef.name) }}
{{- fail "tls.certManager.issuerRef.name is required when tls.certManager.issuerRef is set" }}
{{- end }}
{{- if and .Values.flags.scrapeCaFile .Values.flags.scrapeInsecureSkipVerify }}
{{- fail "flags.scrapeCaFile and flags.scrapeInsecureSkipVerify exclude each other" }}
{{- end }}
{{- if and (eq .Values.tls.mode "secret") .Values.tls.secret.caBundle (not (hasPrefix "-----BEGIN CERTIFICATE-----" (trim .Values.tls.secret.caBundle))) }}
{{- fail "tls.secret.caBundle must be the CA's PEM (-----BEGIN CERTIFICATE-----, e.g. --set-file tls.secret.caBundle=ca.crt), not base64: the chart encodes it" }}
{{- end }}
{{- if and .Values.policyConfig (not (kindIs "invalid" .Values.flags.config)) }}
{{- fail "policyConfig and flags.config exclude each other: policyConfig is mounted and read as --config; flags.config names another file" }}
{{- end }}
{{- include "saturation-adapter.validatePDB" . }}
{{- end }}

{{- /* A PodDisruptionBudget that admits no eviction of a Ready adapter makes every
node drain wait forever (kubectl drain retries the eviction without end). */}}
{{- define "saturation-adapter.validatePDB" -}}
{{- $pdb := .Values.podDisruptionBudget }}
{{- if $pdb.enabled }}
{{- $replicas := int .Values.replicas }}
{{- $min := $pdb.minAvailable }}
{{- $required := 0 }}
{{- if kindIs "string" $min }}
{{- if not (regexMatch "^[0-9]+%$" $min) }}
{{- fail (printf "podDisruptionBudget.minAvailable=%q: want a count or a percentage such as 50%%" $min) }}
{{- end }}
{{- $pct := int (trimSuffix "%" $min) }}
{{- $required = div (add (mul $pct $replicas) 99) 100 }}
{{- else }}
{{- $required = int $min }}
{{- end }}
{{- if and (gt $replicas 0) (ge $required $replicas) }}
{{- fail (printf "podDisruptionBudget.minAvailable=%v with replicas=%d keeps every adapter: no node drain could evict one. Set replicas to at least %d, lower minAvailable, or podDisruptionBudget.enabled=false" $min $replicas (add $required 1)) }}
{{- end }}
{{- end }}
{{- end }}
