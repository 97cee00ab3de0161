{{/* kubelet's --root-dir, without a trailing slash. */}}
{{- define "flux-curve-csi.kubeletDir" -}}
{{- trimSuffix "/" .Values.kubeletDir -}}
{{- end -}}

{{/* One image holds both programs (Dockerfile). */}}
{{- define "flux-curve-csi.image" -}}
{{- printf "%s:%s" .Values.image.repository .Values.image.tag -}}
{{- end -}}

{{/*
The controller's user as the API server names it in request.userInfo,
which the admission policies compare against.
*/}}
{{- define "flux-curve-csi.controllerUser" -}}
{{- printf "system:serviceaccount:%s:minicluster-controller" .Values.namespaces.controller -}}
{{- end -}}
