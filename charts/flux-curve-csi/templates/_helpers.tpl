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

{{/*
The flux-operator's user, whose Jobs the curve-volume-jobs policy admits for
their own MiniCluster (deploy/components/flux-operator), or "" for none.
*/}}
{{- define "flux-curve-csi.fluxOperatorUser" -}}
{{- if and .Values.fluxOperator.serviceAccount (not .Values.multikueue.role) -}}
{{- printf "system:serviceaccount:%s:%s" .Values.fluxOperator.namespace .Values.fluxOperator.serviceAccount -}}
{{- end -}}
{{- end -}}

{{/*
The uid that ServiceAccount must have (fluxOperator.serviceAccountUid), or ""
for any of its name.
*/}}
{{- define "flux-curve-csi.fluxOperatorUid" -}}
{{- if include "flux-curve-csi.fluxOperatorUser" . -}}
{{- .Values.fluxOperator.serviceAccountUid -}}
{{- end -}}
{{- end -}}

{{/*
Non-empty when the chart installs the CSI driver (CSIDriver and
templates/daemonset/): everywhere but on a MultiKueue manager, where no
MiniCluster pod runs (deploy/multikueue/manager).
*/}}
{{- define "flux-curve-csi.driver" -}}
{{- if ne .Values.multikueue.role "manager" }}true{{ end -}}
{{- end -}}

{{/* Non-empty on a MultiKueue worker (deploy/multikueue/worker). */}}
{{- define "flux-curve-csi.multikueueWorker" -}}
{{- if eq .Values.multikueue.role "worker" }}true{{ end -}}
{{- end -}}
