{{/* The release's full name, the prefix of every object. */}}
{{- define "leasewatch.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "leasewatch.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end -}}

{{- define "leasewatch.labels" -}}
{{ include "leasewatch.selectorLabels" . }}
app.kubernetes.io/part-of: leasewatch
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "leasewatch.serviceAccountName" -}}
{{- default (include "leasewatch.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* Whether the NetworkPolicy is made: as set, or with an open dashboard. */}}
{{- define "leasewatch.networkPolicy" -}}
{{- if kindIs "bool" .Values.networkPolicy.enabled -}}
{{- .Values.networkPolicy.enabled -}}
{{- else -}}
{{- and .Values.auth.allowOpen (eq .Values.auth.mode "none") -}}
{{- end -}}
{{- end -}}

{{/* The values' mistakes, each naming its key. */}}
{{- define "leasewatch.validate" -}}
{{- if not .Values.ingest.existingSecret -}}
{{- fail "ingest.existingSecret: required: the Secret holding the ingest tokens (one a line, in ingest.tokensKey)" -}}
{{- end -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.postgres.enabled) -}}
{{- fail "replicaCount: more than 1 needs postgres.enabled: SQLite has one writer" -}}
{{- end -}}
{{- if and .Values.postgres.enabled (not .Values.postgres.url) -}}
{{- fail "postgres.url: required with postgres.enabled" -}}
{{- end -}}
{{- if and .Values.postgres.enabled (not .Values.postgres.existingSecret) -}}
{{- fail "postgres.existingSecret: required with postgres.enabled: the Secret holding the password" -}}
{{- end -}}
{{- if and (eq .Values.auth.mode "basic") (not .Values.auth.existingSecret) -}}
{{- fail "auth.existingSecret: required with auth.mode basic: the Secret holding the htpasswd lines" -}}
{{- end -}}
{{- if not (has .Values.auth.mode (list "none" "basic" "proxy")) -}}
{{- fail (printf "auth.mode: %q: want none, basic or proxy" .Values.auth.mode) -}}
{{- end -}}
{{- include "leasewatch.validateSecrets" . -}}
{{- end -}}

{{/* Secrets given in values, which the chart would write into the ConfigMap:
     each is refused, naming the value that would mount it from a Secret. */}}
{{- define "leasewatch.validateSecrets" -}}
{{- range $i, $s := .Values.sources -}}
{{- if hasKey $s "password" -}}
{{- fail (printf "sources[%d].password: would be written into the ConfigMap: give existingSecret (and passwordKey), the Secret that holds it" $i) -}}
{{- end -}}
{{- if and (hasKey $s "existingSecret") (or (hasKey $s "password_file") (hasKey $s "password_env")) -}}
{{- fail (printf "sources[%d].existingSecret: sets password_file; leave out password_file and password_env" $i) -}}
{{- end -}}
{{- end -}}
{{- if regexMatch "^(?i)postgres(ql)?://[^/]*:[^/]*@|(?i)(^|[\\s?&'])(ssl)?password\\s*=" .Values.postgres.url -}}
{{- fail "postgres.url: holds a password, which would be written into the ConfigMap: leave it out; the chart reads it from postgres.existingSecret" -}}
{{- end -}}
{{- range $key := list "ingest_tokens" "database" "database_password_env" -}}
{{- if hasKey $.Values.config $key -}}
{{- fail (printf "config.%s: set by the chart from its own values (ingest.*, postgres.*), so that no secret is written into the ConfigMap" $key) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* sourceSecretDir is where the Secret of the source at index . is mounted. */}}
{{- define "leasewatch.sourceSecretDir" -}}
{{- printf "/var/run/secrets/leasewatch/sources/%d" . -}}
{{- end -}}

{{/* leasewatch.yaml's sources: the values' sources, with existingSecret and
     passwordKey, which are the chart's, made the password_file of the
     Secret's mount. */}}
{{- define "leasewatch.sources" -}}
{{- $out := list -}}
{{- range $i, $s := .Values.sources -}}
{{- $src := omit $s "existingSecret" "passwordKey" -}}
{{- if $s.existingSecret -}}
{{- $_ := set $src "password_file" (printf "%s/%s" (include "leasewatch.sourceSecretDir" $i) ($s.passwordKey | default "password")) -}}
{{- end -}}
{{- $out = append $out $src -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* leasewatch.yaml, from the values. */}}
{{- define "leasewatch.config" -}}
{{- $cfg := dict "listen" (printf "0.0.0.0:%d" (int .Values.service.port)) -}}
{{- if .Values.postgres.enabled -}}
{{- $_ := set $cfg "database" .Values.postgres.url -}}
{{- $_ := set $cfg "database_password_file" (printf "/var/run/secrets/leasewatch/postgres/%s" .Values.postgres.passwordKey) -}}
{{- if .Values.postgres.caKey -}}
{{- $_ := set $cfg "database_tls" (dict "ca_file" (printf "/var/run/secrets/leasewatch/postgres/%s" .Values.postgres.caKey)) -}}
{{- end -}}
{{- else -}}
{{- $_ := set $cfg "database" "/var/lib/leasewatch/leasewatch.db" -}}
{{- end -}}
{{- $_ := set $cfg "ingest_tokens_file" (printf "/var/run/secrets/leasewatch/ingest/%s" .Values.ingest.tokensKey) -}}
{{- $auth := dict "mode" .Values.auth.mode "protect_metrics" .Values.auth.protectMetrics -}}
{{- if eq .Values.auth.mode "none" -}}
{{- $_ := set $auth "allow_open" .Values.auth.allowOpen -}}
{{- else if eq .Values.auth.mode "basic" -}}
{{- $_ := set $auth "users_file" (printf "/var/run/secrets/leasewatch/auth/%s" .Values.auth.usersKey) -}}
{{- else -}}
{{- $_ := set $auth "proxy_header" .Values.auth.proxyHeader -}}
{{- $_ := set $auth "trusted_proxies" .Values.auth.trustedProxies -}}
{{- end -}}
{{- $_ := set $cfg "auth" $auth -}}
{{- if gt (int .Values.replicaCount) 1 -}}
{{- $_ := set $cfg "replication" (merge (dict "backend" "kubernetes" "namespace" .Release.Namespace) .Values.replication) -}}
{{- end -}}
{{- $_ := set $cfg "sources" (include "leasewatch.sources" . | fromYamlArray) -}}
{{- toYaml (mergeOverwrite $cfg (deepCopy .Values.config)) -}}
{{- end -}}
