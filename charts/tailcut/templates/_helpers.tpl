{{/* Chart name, truncated to a DNS label. */}}
{{- define "tailcut.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The prefix of every resource name. */}}
{{- define "tailcut.fullname" -}}
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

{{- define "tailcut.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "tailcut.labels" -}}
helm.sh/chart: {{ include "tailcut.chart" . }}
app.kubernetes.io/name: {{ include "tailcut.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tailcut
{{- end }}

{{/* Selector labels of one component: include with (list . "operator"). */}}
{{- define "tailcut.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "tailcut.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "tailcut.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tailcut.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository:tag, the tag defaulting to the appVersion: include with (list . .Values.image). */}}
{{- define "tailcut.image" -}}
{{- $root := index . 0 -}}
{{- $img := index . 1 -}}
{{- printf "%s:%s" $img.repository (default $root.Chart.AppVersion ($img.tag | toString)) }}
{{- end }}

{{/* host:port of the operator's xDS Service, as the proxies reach it. */}}
{{- define "tailcut.xdsAddress" -}}
{{- printf "%s.%s.svc:%d" (include "tailcut.fullname" .) .Release.Namespace (int .Values.operator.ports.xds) }}
{{- end }}

{{/* True when the Prometheus Operator resources render: monitoring.enabled
"auto" when the API server serves monitoring.coreos.com/v1, true always. */}}
{{- define "tailcut.monitoring" -}}
{{- $e := toString .Values.monitoring.enabled }}
{{- if or (eq $e "true") (and (eq $e "auto") (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1")) }}true{{ end }}
{{- end }}

{{- define "tailcut.proxyName" -}}
{{- printf "%s-proxy" (include "tailcut.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The xDS TLS Secrets: the ones named in values, or the chart's own (xds-certs.yaml). */}}
{{- define "tailcut.metricsTLSSecret" -}}
{{- .Values.operator.metricsTLS.secret | default (printf "%s-metrics-tls" (include "tailcut.fullname" .) | trunc 63 | trimSuffix "-") }}
{{- end }}

{{- define "tailcut.metricsScraper" -}}
{{- printf "%s-metrics-scraper" (include "tailcut.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tailcut.xdsServerSecret" -}}
{{- .Values.xdsTLS.serverSecret | default (printf "%s-xds-server" (include "tailcut.fullname" .) | trunc 63 | trimSuffix "-") }}
{{- end }}

{{- define "tailcut.xdsProxySecret" -}}
{{- .Values.xdsTLS.proxySecret | default (printf "%s-xds-proxy" (include "tailcut.fullname" .) | trunc 63 | trimSuffix "-") }}
{{- end }}

{{/* The demo needs the proxy: its traffic and its Helm test go through it.
One xDS Secret without the other would pair a certificate with a CA that did not sign it. */}}
{{- define "tailcut.checkValues" -}}
{{- if and .Values.demo.enabled (not .Values.proxy.enabled) }}
{{- fail "demo.enabled needs proxy.enabled: the demo's traffic goes through tailcut's Envoy" }}
{{- end }}
{{- if and .Values.xdsTLS.enabled (ne (empty .Values.xdsTLS.serverSecret) (empty .Values.xdsTLS.proxySecret)) }}
{{- fail "xdsTLS.serverSecret and xdsTLS.proxySecret go together: name both (your own CA), or neither (the chart issues both)" }}
{{- end }}
{{- end }}
