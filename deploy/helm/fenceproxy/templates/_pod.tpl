{{/*
The pod template of both modes: the security context, probes, ports and
preStop of deploy/k8s/gateway and deploy/k8s/cluster.
*/}}
{{- define "fenceproxy.podTemplate" -}}
{{- $cluster := eq .Values.mode "cluster" -}}
{{- $resign := eq .Values.s3.mode "resign" -}}
{{- $fullname := include "fenceproxy.fullname" . -}}
metadata:
  labels:
    {{- include "fenceproxy.selectorLabels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    {{- if $cluster }}
    # A changed endpoint list rolls the replicas (members of the same etcd
    # cluster only: docs/CLUSTER.md).
    checksum/etcd: {{ include (print $.Template.BasePath "/secret-etcd.yaml") . | sha256sum }}
    {{- end }}
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  {{- if or .Values.serviceAccount.create .Values.serviceAccount.name }}
  serviceAccountName: {{ include "fenceproxy.serviceAccountName" . }}
  {{- end }}
  {{- if kindIs "invalid" .Values.serviceAccount.automountToken }}
  # fenceproxy never calls the Kubernetes API; in resign mode the EKS webhooks
  # that give the pod its role (IRSA, Pod Identity) have been reported to need
  # the token.
  automountServiceAccountToken: {{ $resign }}
  {{- else }}
  automountServiceAccountToken: {{ .Values.serviceAccount.automountToken }}
  {{- end }}
  # A Service named like a FENCEPROXY_* prefix would inject variables.
  enableServiceLinks: false
  {{- if not (kindIs "invalid" .Values.terminationGracePeriodSeconds) }}
  terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
  {{- else if $cluster }}
  # > preStop sleep (5s) + FENCEPROXY_SHUTDOWN_TIMEOUT (30s) + the handover's
  # drain (FENCEPROXY_DRAIN_TIMEOUT, 30s) + etcd's goodbye.
  terminationGracePeriodSeconds: 75
  {{- else }}
  # > preStop sleep (5s) + FENCEPROXY_SHUTDOWN_TIMEOUT (30s) + the store's close.
  terminationGracePeriodSeconds: 45
  {{- end }}
  {{- if .Values.affinity }}
  affinity:
    {{- toYaml .Values.affinity | nindent 4 }}
  {{- else if $cluster }}
  # Spread the replicas over nodes: one node's loss takes one replica's shards.
  affinity:
    podAntiAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 100
          podAffinityTerm:
            topologyKey: kubernetes.io/hostname
            labelSelector:
              matchLabels:
                {{- include "fenceproxy.selectorLabels" . | nindent 16 }}
  {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    # The volumes are group-writable (and the Secrets group-readable) by 65532.
    fsGroup: 65532
    {{- if not $cluster }}
    fsGroupChangePolicy: OnRootMismatch
    {{- end }}
    seccompProfile:
      type: RuntimeDefault
  containers:
    - name: fenceproxy
      image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      env:
        - name: FENCEPROXY_UPSTREAM
          value: {{ .Values.upstream | quote }}
        - name: FENCEPROXY_LISTEN
          value: ":8080"
        # Every interface: the kubelet's probes and the control Service reach
        # the pod's IP, not its loopback (the default, 127.0.0.1:9090). There
        # fenceproxy starts only with FENCEPROXY_LEASE_TOKEN (or LEASE_OPEN).
        - name: FENCEPROXY_CONTROL_LISTEN
          value: ":9090"
        {{- if $cluster }}
        - name: FENCEPROXY_STORE
          value: etcd
        - name: FENCEPROXY_ETCD_ENDPOINTS
          valueFrom:
            secretKeyRef:
              name: {{ $fullname }}-etcd
              key: etcd-endpoints
        - name: FENCEPROXY_ETCD_USERNAME
          valueFrom:
            secretKeyRef:
              name: {{ .Values.cluster.secretName }}
              key: etcd-username
              optional: true
        - name: FENCEPROXY_ETCD_PASSWORD
          valueFrom:
            secretKeyRef:
              name: {{ .Values.cluster.secretName }}
              key: etcd-password
              optional: true
        {{- if .Values.etcd.tls.secretName }}
        - name: FENCEPROXY_ETCD_CA_FILE
          value: /etc/fenceproxy/etcd/ca.crt
        {{- if .Values.etcd.tls.clientCert }}
        - name: FENCEPROXY_ETCD_CERT_FILE
          value: /etc/fenceproxy/etcd/tls.crt
        - name: FENCEPROXY_ETCD_KEY_FILE
          value: /etc/fenceproxy/etcd/tls.key
        {{- end }}
        {{- end }}
        # The same on every replica at all times: a literal, so that it
        # changes only with a rollout you make (and then with a full stop).
        - name: FENCEPROXY_ETCD_PREFIX
          value: {{ .Values.etcd.prefix | quote }}
        - name: FENCEPROXY_SHARDS
          value: {{ .Values.cluster.shards | quote }}
        # The replica's name among the live ones: the pod's name, unique.
        - name: FENCEPROXY_REPLICA_ID
          valueFrom:
            fieldRef:
              fieldPath: metadata.name
        - name: POD_IP
          valueFrom:
            fieldRef:
              fieldPath: status.podIP
        # Peers forward requests for this replica's shards here, over plain
        # HTTP authenticated by FENCEPROXY_PEER_SECRET: the NetworkPolicy lets
        # only the replicas reach it, and no Service exposes it.
        - name: FENCEPROXY_PEER_LISTEN
          value: ":8081"
        - name: FENCEPROXY_PEER_ADVERTISE
          value: $(POD_IP):8081
        - name: FENCEPROXY_PEER_SECRET
          valueFrom:
            secretKeyRef:
              name: {{ .Values.cluster.secretName }}
              key: peer-secret
        - name: FENCEPROXY_SHARD_TTL
          value: {{ .Values.cluster.shardTTL | quote }}
        - name: FENCEPROXY_LOCK_DELAY
          value: {{ .Values.cluster.lockDelay | quote }}
        {{- else }}
        - name: FENCEPROXY_DATA_DIR
          value: /var/lib/fenceproxy
        {{- end }}
        - name: FENCEPROXY_SHUTDOWN_TIMEOUT
          value: {{ .Values.shutdownTimeout | quote }}
        - name: FENCEPROXY_DRAIN_TIMEOUT
          value: {{ .Values.drainTimeout | quote }}
        {{- if .Values.tls.proxySecret }}
        - name: FENCEPROXY_TLS_CERT_FILE
          value: /etc/fenceproxy/tls/tls.crt
        - name: FENCEPROXY_TLS_KEY_FILE
          value: /etc/fenceproxy/tls/tls.key
        {{- end }}
        {{- if .Values.tls.controlSecret }}
        - name: FENCEPROXY_CONTROL_TLS_CERT_FILE
          value: /etc/fenceproxy/control-tls/tls.crt
        - name: FENCEPROXY_CONTROL_TLS_KEY_FILE
          value: /etc/fenceproxy/control-tls/tls.key
        {{- end }}
        {{- if ne .Values.s3.mode "off" }}
        - name: FENCEPROXY_S3
          value: {{ .Values.s3.mode | quote }}
        - name: FENCEPROXY_S3_DOMAINS
          value: {{ default (list $fullname) .Values.s3.domains | join "," | quote }}
        {{- end }}
        {{- if $resign }}
        # The workers' keys and grants, re-read every 5s.
        - name: FENCEPROXY_S3_CREDENTIALS_FILE
          value: /etc/fenceproxy/s3/credentials.yaml
        - name: FENCEPROXY_S3_REGION
          value: {{ .Values.s3.region | quote }}
        - name: FENCEPROXY_S3_STORE_STYLE
          value: {{ .Values.s3.storeStyle | quote }}
        - name: FENCEPROXY_S3_TOKEN_METADATA
          value: {{ .Values.s3.tokenMetadata | quote }}
        {{- with .Values.s3.storeCredentialsSecret }}
        - name: AWS_ACCESS_KEY_ID
          valueFrom:
            secretKeyRef:
              name: {{ . }}
              key: access-key-id
        - name: AWS_SECRET_ACCESS_KEY
          valueFrom:
            secretKeyRef:
              name: {{ . }}
              key: secret-access-key
        {{- end }}
        # Never fall back to the node's instance role: a pod whose role is not
        # set up fails at start instead of writing as the node.
        - name: AWS_EC2_METADATA_DISABLED
          value: "true"
        {{- end }}
        {{- if .Values.tokens.secretName }}
        # Admin calls: refused while the Secret has no admin-token.
        - name: FENCEPROXY_ADMIN_TOKEN
          valueFrom:
            secretKeyRef:
              name: {{ .Values.tokens.secretName }}
              key: {{ .Values.tokens.adminTokenKey }}
              optional: true
        {{- end }}
        {{- if .Values.tokens.leaseOpen }}
        # The lease API open to whatever the NetworkPolicy admits.
        - name: FENCEPROXY_LEASE_OPEN
          value: "true"
        {{- else }}
        # Required: the pod does not start without it.
        - name: FENCEPROXY_LEASE_TOKEN
          valueFrom:
            secretKeyRef:
              name: {{ .Values.tokens.secretName }}
              key: {{ .Values.tokens.leaseTokenKey }}
        {{- end }}
        {{- with .Values.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      ports:
        - name: http
          containerPort: 8080
          protocol: TCP
        - name: control
          containerPort: 9090
          protocol: TCP
        {{- if $cluster }}
        - name: peer
          containerPort: 8081
          protocol: TCP
        {{- end }}
      livenessProbe:
        httpGet:
          path: /healthz
          port: control
          scheme: {{ include "fenceproxy.controlScheme" . }}
        periodSeconds: 10
        timeoutSeconds: 2
        failureThreshold: 3
      # 503 from the start of shutdown{{ if $cluster }}, and while the replica has no etcd session{{ end }}.
      readinessProbe:
        httpGet:
          path: /readyz
          port: control
          scheme: {{ include "fenceproxy.controlScheme" . }}
        periodSeconds: 5
        timeoutSeconds: 2
        failureThreshold: 2
      lifecycle:
        preStop:
          # Distroless image, no shell: the kubelet sleeps (Kubernetes 1.30+)
          # while the pod leaves the Service endpoints, then sends SIGTERM.
          sleep:
            seconds: 5
      {{- $mounts := list }}
      {{- if not $cluster }}
      {{- $mounts = append $mounts (dict "name" "fences" "mountPath" "/var/lib/fenceproxy") }}
      {{- end }}
      {{- if and $cluster .Values.etcd.tls.secretName }}
      {{- $mounts = append $mounts (dict "name" "etcd-tls" "mountPath" "/etc/fenceproxy/etcd" "readOnly" true) }}
      {{- end }}
      {{- if .Values.tls.proxySecret }}
      {{- $mounts = append $mounts (dict "name" "tls" "mountPath" "/etc/fenceproxy/tls" "readOnly" true) }}
      {{- end }}
      {{- if .Values.tls.controlSecret }}
      {{- $mounts = append $mounts (dict "name" "control-tls" "mountPath" "/etc/fenceproxy/control-tls" "readOnly" true) }}
      {{- end }}
      {{- if $resign }}
      {{- $mounts = append $mounts (dict "name" "s3-credentials" "mountPath" "/etc/fenceproxy/s3" "readOnly" true) }}
      {{- end }}
      {{- with $mounts }}
      volumeMounts:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        capabilities:
          drop: ["ALL"]
      resources:
        {{- toYaml .Values.resources | nindent 8 }}
  {{- $volumes := list }}
  {{- if and $cluster .Values.etcd.tls.secretName }}
  {{- $volumes = append $volumes (dict "name" "etcd-tls" "secret" (dict "secretName" .Values.etcd.tls.secretName "defaultMode" 288)) }}
  {{- end }}
  {{- if .Values.tls.proxySecret }}
  {{- $volumes = append $volumes (dict "name" "tls" "secret" (dict "secretName" .Values.tls.proxySecret "defaultMode" 288)) }}
  {{- end }}
  {{- if .Values.tls.controlSecret }}
  {{- $volumes = append $volumes (dict "name" "control-tls" "secret" (dict "secretName" .Values.tls.controlSecret "defaultMode" 288)) }}
  {{- end }}
  {{- if $resign }}
  {{- $volumes = append $volumes (dict "name" "s3-credentials" "secret" (dict "secretName" .Values.s3.credentialsSecret "defaultMode" 288)) }}
  {{- end }}
  {{- with $volumes }}
  # Secrets mounted as directories (a subPath mount never sees their updates),
  # readable by the pod's fsGroup only (0440).
  volumes:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
