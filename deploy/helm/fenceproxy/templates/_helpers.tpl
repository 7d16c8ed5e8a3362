{{/* The chart's name. */}}
{{- define "fenceproxy.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The objects' name: the release's, with the chart's name unless it has it. */}}
{{- define "fenceproxy.fullname" -}}
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

{{/* The pods' selector labels. */}}
{{- define "fenceproxy.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fenceproxy.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Every object's labels. */}}
{{- define "fenceproxy.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "fenceproxy.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: {{ .Values.mode }}
{{- end }}

{{- define "fenceproxy.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "fenceproxy.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The replicas: gateway exactly 1, cluster at least 3 (default 3). */}}
{{- define "fenceproxy.replicas" -}}
{{- if eq .Values.mode "gateway" }}
{{- if and (not (kindIs "invalid" .Values.replicas)) (ne (int .Values.replicas) 1) }}
{{- fail (printf "replicas: gateway mode runs exactly 1 replica (one FENCEPROXY_DATA_DIR, one writer), not %v; use mode cluster to scale" .Values.replicas) }}
{{- end }}
{{- 1 }}
{{- else }}
{{- $n := 3 }}
{{- if not (kindIs "invalid" .Values.replicas) }}{{ $n = int .Values.replicas }}{{ end }}
{{- if lt $n 3 }}
{{- fail (printf "replicas: cluster mode needs at least 3 replicas (one lost or drained, two carry its shards), not %d" $n) }}
{{- end }}
{{- $n }}
{{- end }}
{{- end }}

{{/* Refuses values that cannot make a working release, with a message. */}}
{{- define "fenceproxy.validate" -}}
{{- if not (has .Values.mode (list "gateway" "cluster")) }}
{{- fail (printf "mode: %q must be gateway or cluster (the sidecar is a kustomize component: deploy/k8s/sidecar)" (toString .Values.mode)) }}
{{- end }}
{{- if not .Values.upstream }}
{{- fail "upstream is required: the URL of the backend or object store (FENCEPROXY_UPSTREAM)" }}
{{- end }}
{{- if not .Values.tokens.leaseOpen }}
{{- if not .Values.tokens.secretName }}
{{- fail "tokens.secretName is required (its lease-token guards the lease API), or set tokens.leaseOpen=true" }}
{{- end }}
{{- end }}
{{- if eq .Values.mode "cluster" }}
{{- if not .Values.etcd.endpoints }}
{{- fail "etcd.endpoints is required in cluster mode: the client URLs of your etcd cluster, e.g. {https://etcd-0.etcd:2379,https://etcd-1.etcd:2379}" }}
{{- end }}
{{- range .Values.etcd.endpoints }}
{{- if not (regexMatch "^https?://[^/]+" .) }}
{{- fail (printf "etcd.endpoints: %q is not an http:// or https:// URL" .) }}
{{- end }}
{{- if and $.Values.etcd.tls.secretName (not (hasPrefix "https://" .)) }}
{{- fail (printf "etcd.endpoints: %q is not https://, but etcd.tls.secretName is set" .) }}
{{- end }}
{{- end }}
{{- if not .Values.cluster.secretName }}
{{- fail "cluster.secretName is required in cluster mode: a Secret with peer-secret (and etcd-username, etcd-password when etcd's authentication is on)" }}
{{- end }}
{{- end }}
{{- if and .Values.etcd.tls.clientCert (not .Values.etcd.tls.secretName) }}
{{- fail "etcd.tls.clientCert needs etcd.tls.secretName" }}
{{- end }}
{{- if eq .Values.s3.mode "resign" }}
{{- if not .Values.s3.credentialsSecret }}
{{- fail "s3.credentialsSecret is required with s3.mode resign: a Secret with credentials.yaml, the workers' keys and grants" }}
{{- end }}
{{- if not (hasPrefix "https://" .Values.upstream) }}
{{- fail (printf "upstream: %q must be https:// with s3.mode resign (the store's signatures and every body cross the network)" .Values.upstream) }}
{{- end }}
{{- end }}
{{- if and (eq .Values.s3.mode "resign") (not .Values.serviceAccount.create) (not .Values.serviceAccount.name) }}
{{- fail "s3.mode resign needs a ServiceAccount: serviceAccount.create, or serviceAccount.name of an existing one" }}
{{- end }}
{{- $_ := include "fenceproxy.replicas" . }}
{{- end }}

{{/* The control listener's probe scheme. */}}
{{- define "fenceproxy.controlScheme" -}}
{{- if .Values.tls.controlSecret }}HTTPS{{ else }}HTTP{{ end }}
{{- end }}
