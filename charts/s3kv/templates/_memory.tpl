{{/* The gateway's memory bound (docs/operations.md, "Gateway memory") against the container's
memory limit. The gateway holds at most max_open_segments x segment_size of segments,
max_request_memory of request bodies, max_read_memory of blocks read, dram_cache of hot blocks,
plus the process (~256 MiB) and the index (not known here: it grows with the store). A limit
under that sum is an OOM kill waiting for the first busy hour, losing the write-back blocks of
the open segments, so the chart refuses it. Defaults are s3kv/config.py's (a test pins them). */}}

{{/* A settings size as s3kv/sizes.py parses it (4096, 256MiB, 10GB, 1.5GiB), in bytes; "" if
it is none of those. */}}
{{- define "s3kv.sizeBytes" -}}
{{- if or (kindIs "float64" .) (kindIs "int" .) (kindIs "int64" .) -}}
{{- float64 . -}}
{{- else -}}
{{- $text := lower (toString .) | nospace -}}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" $text -}}
{{- $unit := trimPrefix $number $text | trimSuffix "b" -}}
{{- $factors := dict "" 1.0 "k" 1e3 "m" 1e6 "g" 1e9 "t" 1e12 "ki" 1024.0 "mi" 1048576.0 "gi" 1073741824.0 "ti" 1099511627776.0 -}}
{{- if and $number (hasKey $factors $unit) -}}
{{- mulf (float64 $number) (get $factors $unit) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A Kubernetes memory quantity (2Gi, 1536Mi, 2G, 2147483648, 129e6), in bytes; "" for a form
not read here (then nothing is checked). */}}
{{- define "s3kv.quantityBytes" -}}
{{- $text := toString . | nospace -}}
{{- if or (kindIs "float64" .) (kindIs "int" .) (kindIs "int64" .) -}}
{{- float64 . -}}
{{- else if regexMatch "^[0-9]+(\\.[0-9]+)?(e[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$" $text -}}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" $text -}}
{{- $suffix := trimPrefix $number $text -}}
{{- $factors := dict "" 1.0 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 -}}
{{- if hasPrefix "e" $suffix -}}
{{- float64 $text -}}
{{- else -}}
{{- mulf (float64 $number) (get $factors $suffix) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "s3kv.checkMemory" -}}
{{- $limit := "" -}}
{{- with .Values.resources }}{{ with .limits }}{{ if hasKey . "memory" }}
{{- $limit = include "s3kv.quantityBytes" .memory -}}
{{- end }}{{ end }}{{ end -}}
{{- if $limit -}}
{{- $c := .Values.config -}}
{{- $bytes := dict -}}
{{- range $name, $default := dict "segment_size" "256MiB" "max_request_memory" "512MiB" "max_read_memory" "512MiB" "dram_cache" "0" -}}
{{- $value := include "s3kv.sizeBytes" (hasKey $c $name | ternary (get $c $name) $default) -}}
{{- $_ := set $bytes $name (ternary $value "0" (ne $value "")) -}}
{{- end -}}
{{- $segments := hasKey $c "max_open_segments" | ternary (get $c "max_open_segments") 2 | float64 -}}
{{- $needed := addf (mulf $segments (float64 $bytes.segment_size)) (float64 $bytes.max_request_memory) (float64 $bytes.max_read_memory) (float64 $bytes.dram_cache) 268435456.0 -}}
{{- if lt (float64 $limit) $needed -}}
{{- fail (printf "resources.limits.memory (%v) is below the gateway's own memory bound: max_open_segments x segment_size (%d x %s) + max_request_memory (%s) + max_read_memory (%s) + dram_cache (%s) + 256Mi for the process = %dMi, before the index (docs/operations.md, Gateway memory): raise the limit to at least %dMi or lower those settings" (toString .Values.resources.limits.memory) (int $segments) (include "s3kv.mib" $bytes.segment_size) (include "s3kv.mib" $bytes.max_request_memory) (include "s3kv.mib" $bytes.max_read_memory) (include "s3kv.mib" $bytes.dram_cache) (int (ceil (divf $needed 1048576.0))) (int (ceil (divf $needed 1048576.0)))) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "s3kv.mib" -}}
{{- printf "%dMi" (int (ceil (divf (float64 .) 1048576.0))) -}}
{{- end -}}
