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

{{/* In-cluster URL of the controller, for agents: https when TLS is on (the default). */}}
{{- define "stampede.controller.url" -}}
{{- printf "%s://%s:%d" (ternary "https" "http" .Values.tls.enabled) (include "stampede.controller.host" .) (int .Values.controller.service.port) -}}
{{- end -}}

{{/* The controller Service's in-cluster name: what agents dial, and the name its certificate is checked against. */}}
{{- define "stampede.controller.host" -}}
{{- printf "%s.%s.svc" (include "stampede.controller.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/* The Secret holding the controller's certificate (tls.crt, tls.key) and its CA (ca.crt). */}}
{{- define "stampede.tlsSecretName" -}}
{{- if .Values.tls.existingSecret -}}
{{- .Values.tls.existingSecret -}}
{{- else -}}
{{- printf "%s-tls" (include "stampede.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* Where the TLS Secret is mounted in the controller and the agents. */}}
{{- define "stampede.tlsDir" -}}
/var/run/stampede/tls
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

{{/* The controller's and the targets' pod security context (podSecurityContext); the agents' adds its port-range sysctl to the same values. */}}
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

{{/*
A CIDR as "FAMILY/PREFIX/BITS": the family (4 or 6), the prefix length, and the address as a string of 32 or 128
binary digits. Used to decide which denyCidrs lie inside which allowed block (a NetworkPolicy ipBlock's except must
be a strict subset of its cidr, or the API server rejects the object). IPv6 takes the usual hex notation with at most
one "::" (no embedded dotted IPv4).
*/}}
{{- define "stampede.cidrBits" -}}
{{- $parts := splitList "/" (lower (trim .)) -}}
{{- if ne (len $parts) 2 -}}{{- fail (printf "%q is not a CIDR (ADDRESS/PREFIX)" .) -}}{{- end -}}
{{- $addr := index $parts 0 -}}
{{- $prefix := atoi (index $parts 1) -}}
{{- $bits := "" -}}
{{- if contains ":" $addr -}}
{{- $hex := dict "0" "0000" "1" "0001" "2" "0010" "3" "0011" "4" "0100" "5" "0101" "6" "0110" "7" "0111" "8" "1000" "9" "1001" "a" "1010" "b" "1011" "c" "1100" "d" "1101" "e" "1110" "f" "1111" -}}
{{- $halves := splitList "::" $addr -}}
{{- if gt (len $halves) 2 -}}{{- fail (printf "%q: more than one \"::\"" .) -}}{{- end -}}
{{- $left := list -}}
{{- if index $halves 0 }}{{ $left = splitList ":" (index $halves 0) }}{{ end -}}
{{- $right := list -}}
{{- if and (eq (len $halves) 2) (index $halves 1) }}{{ $right = splitList ":" (index $halves 1) }}{{ end -}}
{{- $groups := $left -}}
{{- if eq (len $halves) 2 -}}
{{- range until (int (sub 8 (add (len $left) (len $right)))) }}{{ $groups = append $groups "0" }}{{ end -}}
{{- $groups = concat $groups $right -}}
{{- end -}}
{{- if ne (len $groups) 8 -}}{{- fail (printf "%q is not an IPv6 CIDR (8 groups of 16 bits)" .) -}}{{- end -}}
{{- range $g := $groups -}}
{{- if or (eq $g "") (gt (len $g) 4) -}}{{- fail (printf "%q: bad IPv6 group %q" $ $g) -}}{{- end -}}
{{- range $ch := splitList "" (printf "%4s" $g | replace " " "0") -}}
{{- if not (hasKey $hex $ch) -}}{{- fail (printf "%q: %q is not a hex digit" $ $ch) -}}{{- end -}}
{{- $bits = print $bits (index $hex $ch) -}}
{{- end -}}
{{- end -}}
{{- if gt $prefix 128 -}}{{- fail (printf "%q: prefix above 128" .) -}}{{- end -}}
6/{{ $prefix }}/{{ $bits }}
{{- else -}}
{{- $octets := splitList "." $addr -}}
{{- if ne (len $octets) 4 -}}{{- fail (printf "%q is not an IPv4 CIDR" .) -}}{{- end -}}
{{- range $o := $octets -}}
{{- if or (not (regexMatch "^[0-9]{1,3}$" $o)) (gt (atoi $o) 255) -}}{{- fail (printf "%q: bad IPv4 octet %q" $ $o) -}}{{- end -}}
{{- $bits = print $bits (printf "%08b" (atoi $o)) -}}
{{- end -}}
{{- if gt $prefix 32 -}}{{- fail (printf "%q: prefix above 32" .) -}}{{- end -}}
4/{{ $prefix }}/{{ $bits }}
{{- end -}}
{{- end -}}

{{/*
One ipBlock peer per allowed CIDR, each with the denied CIDRs that lie inside it as `except`:
(dict "allow" LIST "deny" LIST). CIDRs are either nested or disjoint, so a denied CIDR is inside an allowed one,
covers it (rendering fails: that allowed entry would allow nothing), or is unrelated (skipped).
*/}}
{{- define "stampede.ipBlocks" -}}
{{- $deny := .deny -}}
{{- range $a := .allow }}
{{- $ab := splitList "/" (include "stampede.cidrBits" $a) }}
{{- $aprefix := atoi (index $ab 1) }}
{{- $except := list }}
{{- range $d := $deny }}
{{- $db := splitList "/" (include "stampede.cidrBits" $d) }}
{{- $dprefix := atoi (index $db 1) }}
{{- if eq (index $ab 0) (index $db 0) }}
{{- $common := min $aprefix $dprefix | int }}
{{- if eq (substr 0 $common (index $ab 2)) (substr 0 $common (index $db 2)) }}
{{- if gt $dprefix $aprefix }}
{{- $except = append $except $d }}
{{- else }}
{{- fail (printf "networkPolicy.agentEgress: allowCidrs entry %s lies inside denyCidrs entry %s, so it would allow nothing" $a $d) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
- ipBlock:
    cidr: {{ $a | quote }}
    {{- with $except }}
    except:
      {{- range . }}
      - {{ . | quote }}
      {{- end }}
    {{- end }}
{{- end }}
{{- end -}}
