// Package deploy holds deployment files. Its test builds the Kubernetes manifests
// in deploy/k8s with kustomize and checks them against fenceproxy's configuration.
package deploy

import (
	"cmp"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"maps"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/fenceproxy/fenceproxy/config"
)

// The image's user (distroless nonroot) and the name of the proxy's container.
const (
	imageUID           = 65532
	proxyContainerName = "fenceproxy"
)

// manifests are the objects of one kustomize build, decoded strictly.
type manifests struct {
	deployments  []*appsv1.Deployment
	statefulSets []*appsv1.StatefulSet
	services     []*corev1.Service
	pvcs         []*corev1.PersistentVolumeClaim
	policies     []*networkingv1.NetworkPolicy
	accounts     []*corev1.ServiceAccount
	budgets      []*policyv1.PodDisruptionBudget
	secrets      []*corev1.Secret
	// serviceMonitors are monitoring.coreos.com/v1 ServiceMonitors.
	serviceMonitors []*unstructured.Unstructured
}

// build runs kustomize in-process on dir (relative to this package) and decodes
// every resulting object into its k8s.io/api type (manifests.add).
func build(t *testing.T, dir string) *manifests {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), abs)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	m := &manifests{}
	for _, r := range rm.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatalf("%s: %v", r.CurId(), err)
		}
		if err := m.add(y); err != nil {
			t.Fatalf("kustomize build %s: %v", dir, err)
		}
	}
	return m
}

// add decodes one object (YAML) into its k8s.io/api type, refusing unknown
// fields, an unexpected apiVersion and kinds this test does not check. A
// ServiceMonitor, a Prometheus Operator kind, is kept unstructured.
func (m *manifests) add(y []byte) error {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(y, &head); err != nil {
		return fmt.Errorf("%v\n%s", err, y)
	}
	id := head.Kind + "/" + head.Metadata.Name
	var obj any
	var apiVersion string
	switch head.Kind {
	case "Deployment":
		d := &appsv1.Deployment{}
		m.deployments, obj, apiVersion = append(m.deployments, d), d, "apps/v1"
	case "StatefulSet":
		s := &appsv1.StatefulSet{}
		m.statefulSets, obj, apiVersion = append(m.statefulSets, s), s, "apps/v1"
	case "Service":
		s := &corev1.Service{}
		m.services, obj, apiVersion = append(m.services, s), s, "v1"
	case "PersistentVolumeClaim":
		p := &corev1.PersistentVolumeClaim{}
		m.pvcs, obj, apiVersion = append(m.pvcs, p), p, "v1"
	case "NetworkPolicy":
		p := &networkingv1.NetworkPolicy{}
		m.policies, obj, apiVersion = append(m.policies, p), p, "networking.k8s.io/v1"
	case "ServiceAccount":
		a := &corev1.ServiceAccount{}
		m.accounts, obj, apiVersion = append(m.accounts, a), a, "v1"
	case "PodDisruptionBudget":
		b := &policyv1.PodDisruptionBudget{}
		m.budgets, obj, apiVersion = append(m.budgets, b), b, "policy/v1"
	case "Secret":
		s := &corev1.Secret{}
		m.secrets, obj, apiVersion = append(m.secrets, s), s, "v1"
	case "ServiceMonitor":
		u := &unstructured.Unstructured{}
		m.serviceMonitors, obj, apiVersion = append(m.serviceMonitors, u), &u.Object, "monitoring.coreos.com/v1"
	default:
		return fmt.Errorf("%s: kind %s is not checked by this test; add it here", id, head.Kind)
	}
	if head.APIVersion != apiVersion {
		return fmt.Errorf("%s: apiVersion %q, want %q", id, head.APIVersion, apiVersion)
	}
	if err := yaml.UnmarshalStrict(y, obj); err != nil {
		return fmt.Errorf("%s does not decode strictly into %T: %v\n%s", id, obj, err, y)
	}
	return nil
}

// knownVariables lists the FENCEPROXY_* variables from config.Config's env tags.
func knownVariables(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{}
	typ := reflect.TypeFor[config.Config]()
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("env"), ",")
		if name != "" {
			known[config.Prefix+name] = true
		}
	}
	if len(known) < 10 || !known[config.Prefix+"DATA_DIR"] || !known[config.Prefix+"UPSTREAM"] {
		t.Fatalf("reading config.Config's env tags found only %v", known)
	}
	return known
}

// workload is a Deployment or StatefulSet seen through what this test checks.
type workload struct {
	id       string
	replicas *int32
	tmpl     *corev1.PodTemplateSpec
	// claim returns the spec of the claim behind a pod volume, or nil when the
	// volume is not a claim of this build.
	claim func(volume string) *corev1.PersistentVolumeClaimSpec
	// extra lists kind-specific problems; cluster: the pod runs in cluster
	// mode (FENCEPROXY_STORE=etcd), several replicas on one etcd.
	extra func(cluster bool) []string
}

func (m *manifests) workloads() []workload {
	var ws []workload
	for _, d := range m.deployments {
		ws = append(ws, workload{
			id: "Deployment/" + d.Name, replicas: d.Spec.Replicas, tmpl: &d.Spec.Template,
			claim: func(volume string) *corev1.PersistentVolumeClaimSpec {
				return m.podVolumeClaim(&d.Spec.Template, volume)
			},
			extra: func(cluster bool) []string {
				if !cluster && d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
					return []string{fmt.Sprintf("strategy %q: must be Recreate (a rolling update runs two writers on one DATA_DIR)", d.Spec.Strategy.Type)}
				}
				return nil
			},
		})
	}
	for _, s := range m.statefulSets {
		ws = append(ws, workload{
			id: "StatefulSet/" + s.Name, replicas: s.Spec.Replicas, tmpl: &s.Spec.Template,
			claim: func(volume string) *corev1.PersistentVolumeClaimSpec {
				for i := range s.Spec.VolumeClaimTemplates {
					if s.Spec.VolumeClaimTemplates[i].Name == volume {
						return &s.Spec.VolumeClaimTemplates[i].Spec
					}
				}
				return m.podVolumeClaim(&s.Spec.Template, volume)
			},
			extra: func(cluster bool) []string {
				var p []string
				for _, vct := range s.Spec.VolumeClaimTemplates {
					if !slices.Equal(vct.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}) {
						p = append(p, fmt.Sprintf("volumeClaimTemplate %s: accessModes %v, want [ReadWriteOncePod]", vct.Name, vct.Spec.AccessModes))
					}
				}
				if rp := s.Spec.PersistentVolumeClaimRetentionPolicy; rp != nil && rp.WhenDeleted == appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
					p = append(p, "persistentVolumeClaimRetentionPolicy.whenDeleted Delete would reset every maximum to 0")
				}
				if svc := m.service(s.Spec.ServiceName); svc == nil || svc.Spec.ClusterIP != corev1.ClusterIPNone {
					p = append(p, fmt.Sprintf("serviceName %q must name a headless Service of this build", s.Spec.ServiceName))
				}
				return p
			},
		})
	}
	return ws
}

func (m *manifests) podVolumeClaim(tmpl *corev1.PodTemplateSpec, volume string) *corev1.PersistentVolumeClaimSpec {
	for _, v := range tmpl.Spec.Volumes {
		if v.Name != volume || v.PersistentVolumeClaim == nil {
			continue
		}
		for _, pvc := range m.pvcs {
			if pvc.Name == v.PersistentVolumeClaim.ClaimName {
				return &pvc.Spec
			}
		}
	}
	return nil
}

func (m *manifests) service(name string) *corev1.Service {
	for _, s := range m.services {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// proxyConfig is the proxy container of a workload with its parsed configuration.
type proxyConfig struct {
	c                      *corev1.Container
	cfg                    config.Config
	listenPort, ctrlPort   int32
	upstreamHost, dataDir  string
	shutdown               time.Duration
	otherContainersInPod   []*corev1.Container
	allContainers          []*corev1.Container
	configurationProblems  []string
	containerLookupProblem string
	// credentialsFile is FENCEPROXY_S3_CREDENTIALS_FILE as the pod sees it
	// (parsing reads credentialsStandIn in its place).
	credentialsFile string
	// files are the variables of fileStandIns that the pod sets, with the
	// path each names in the pod (parsing reads a stand-in in its place).
	files map[string]string
	// environ is what config.Parse read: the literal values with $(VAR)
	// references expanded, and stand-ins for the downward API and for the
	// Secret values of cluster mode.
	environ map[string]string
	// cluster: FENCEPROXY_STORE=etcd; peerPort is FENCEPROXY_PEER_LISTEN's.
	cluster  bool
	peerPort int32
	drain    time.Duration
}

// credentialsStandIn is a valid credentials file that config.Parse reads in
// place of the pod's FENCEPROXY_S3_CREDENTIALS_FILE, which exists only in the
// pod (a Secret volume).
const credentialsStandIn = "testdata/s3-credentials.yaml"

// fileStandIns are the variables naming a file that the pod reads from a
// Secret volume, each with the kind of stand-in config.Parse reads in its
// place: the S3 credentials, or a certificate or key made by tlsStandIns.
var fileStandIns = map[string]string{
	config.Prefix + "S3_CREDENTIALS_FILE":   "credentials",
	config.Prefix + "TLS_CERT_FILE":         "cert",
	config.Prefix + "TLS_KEY_FILE":          "key",
	config.Prefix + "CONTROL_TLS_CERT_FILE": "cert",
	config.Prefix + "CONTROL_TLS_KEY_FILE":  "key",
	config.Prefix + "ETCD_CA_FILE":          "cert",
	config.Prefix + "ETCD_CERT_FILE":        "cert",
	config.Prefix + "ETCD_KEY_FILE":         "key",
}

// tlsStandIns writes, once per test binary, a self-signed certificate (its
// own CA) and its key into a temporary directory that TestMain removes.
var tlsStandIns = sync.OnceValues(func() (map[string]string, error) {
	dir, err := os.MkdirTemp("", "fenceproxy-deploy-test-")
	if err != nil {
		return nil, err
	}
	standInDir = dir
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "fenceproxy stand-in"},
		DNSNames:              []string{"fenceproxy"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	files := map[string]string{"cert": filepath.Join(dir, "tls.crt"), "key": filepath.Join(dir, "tls.key")}
	if err := os.WriteFile(files["cert"], pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(files["key"], pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, err
	}
	files["credentials"] = credentialsStandIn
	return files, nil
})

// standInDir is tlsStandIns' directory, once made.
var standInDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if standInDir != "" {
		os.RemoveAll(standInDir)
	}
	os.Exit(code)
}

func proxyOf(w workload, known map[string]bool) proxyConfig {
	var pc proxyConfig
	spec := &w.tmpl.Spec
	for i := range spec.InitContainers {
		pc.allContainers = append(pc.allContainers, &spec.InitContainers[i])
	}
	for i := range spec.Containers {
		pc.allContainers = append(pc.allContainers, &spec.Containers[i])
	}
	for _, c := range pc.allContainers {
		if c.Name == proxyContainerName && slices.ContainsFunc(spec.Containers, func(x corev1.Container) bool { return x.Name == c.Name }) {
			pc.c = c
		} else {
			pc.otherContainersInPod = append(pc.otherContainersInPod, c)
		}
	}
	if pc.c == nil {
		pc.containerLookupProblem = fmt.Sprintf("no container named %q in spec.containers", proxyContainerName)
		return pc
	}
	// Every FENCEPROXY_* name in any container must be a real variable.
	for _, c := range pc.allContainers {
		if len(c.EnvFrom) > 0 {
			pc.configurationProblems = append(pc.configurationProblems, fmt.Sprintf("container %s: envFrom hides variable names from this check; list them under env", c.Name))
		}
		for _, e := range c.Env {
			if strings.HasPrefix(e.Name, config.Prefix) && !known[e.Name] {
				pc.configurationProblems = append(pc.configurationProblems, fmt.Sprintf("container %s: unknown variable %s", c.Name, e.Name))
			}
		}
	}
	// The values must pass fenceproxy's own parsing: the literal ones, with
	// $(VAR) references expanded as the kubelet does, and stand-ins for the
	// downward API and for the Secret values the pod needs (each checked
	// to be a Secret key that is not optional: cluster mode's, the lease
	// token's); other valueFrom ones are optional secrets, left unset here.
	environ := map[string]string{}
	for _, e := range pc.c.Env {
		switch {
		case e.ValueFrom == nil:
			environ[e.Name] = expandEnv(e.Value, environ)
		case e.ValueFrom.FieldRef != nil && fieldStandIns[e.ValueFrom.FieldRef.FieldPath] != "":
			environ[e.Name] = fieldStandIns[e.ValueFrom.FieldRef.FieldPath]
		case e.ValueFrom.SecretKeyRef != nil && secretStandIns[e.Name] != "":
			environ[e.Name] = secretStandIns[e.Name]
		}
	}
	pc.environ = environ
	pc.cluster = environ[config.Prefix+"STORE"] == "etcd"
	pc.credentialsFile = environ[config.Prefix+"S3_CREDENTIALS_FILE"]
	for name, kind := range fileStandIns {
		f, ok := environ[name]
		if !ok || f == "" {
			continue
		}
		standIns, err := tlsStandIns()
		if err != nil {
			pc.configurationProblems = append(pc.configurationProblems, "making the stand-in files: "+err.Error())
			return pc
		}
		if pc.files == nil {
			pc.files = map[string]string{}
		}
		pc.files[name] = f
		environ[name] = standIns[kind]
	}
	cfg, warnings, err := config.Parse(environ)
	if err != nil {
		pc.configurationProblems = append(pc.configurationProblems, "configuration: "+err.Error())
		return pc
	}
	for _, w := range warnings {
		pc.configurationProblems = append(pc.configurationProblems, "configuration warning: "+w)
	}
	pc.cfg = cfg
	pc.listenPort = portOf(cfg.Listen)
	pc.ctrlPort = portOf(cfg.ControlListen)
	pc.upstreamHost = cfg.Upstream.Hostname()
	pc.dataDir = filepath.Clean(cfg.DataDir)
	pc.shutdown = cfg.ShutdownTimeout
	pc.drain = cfg.DrainTimeout
	if pc.cluster {
		peer, ok := environ[config.Prefix+"PEER_LISTEN"]
		if !ok {
			peer = configDefault(config.Prefix + "PEER_LISTEN")
		}
		pc.peerPort = portOf(peer)
	}
	return pc
}

// Stand-ins config.Parse reads for values the pod gets at run time.
var (
	// fieldStandIns: the downward API's fields, by path.
	fieldStandIns = map[string]string{
		"metadata.name": "fenceproxy-cluster-6c9f7d8b5-x2kqp",
		"status.podIP":  "10.244.1.17",
	}
	// secretStandIns: Secret values, by variable.
	secretStandIns = map[string]string{
		config.Prefix + "LEASE_TOKEN":    "stand-in-lease-token",
		config.Prefix + "ETCD_ENDPOINTS": "http://etcd-0.etcd:2379,http://etcd-1.etcd:2379,http://etcd-2.etcd:2379",
		config.Prefix + "ETCD_USERNAME":  "fenceproxy",
		config.Prefix + "ETCD_PASSWORD":  "stand-in-etcd-password",
		config.Prefix + "PEER_SECRET":    "stand-in-peer-secret-0123456789",
	}
)

// expandEnv expands $(NAME) references to variables defined before, as the
// kubelet does: $$ is a literal $, and a reference to an undefined name stays
// as written.
func expandEnv(v string, defined map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] != '$' || i+1 == len(v) {
			b.WriteByte(v[i])
			continue
		}
		switch v[i+1] {
		case '$':
			b.WriteByte('$')
			i++
			continue
		case '(':
			if end := strings.IndexByte(v[i+2:], ')'); end >= 0 {
				name := v[i+2 : i+2+end]
				if val, ok := defined[name]; ok {
					b.WriteString(val)
				} else {
					b.WriteString(v[i : i+3+end])
				}
				i += 2 + end
				continue
			}
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// configDefault is a variable's default from config.Config's envDefault tag
// (the one place defaults are defined); "" when it has none.
func configDefault(variable string) string {
	typ := reflect.TypeFor[config.Config]()
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("env"), ",")
		if name != "" && config.Prefix+name == variable {
			return typ.Field(i).Tag.Get("envDefault")
		}
	}
	return ""
}

func portOf(addr string) int32 {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return -1
	}
	n, err := strconv.ParseInt(p, 10, 32)
	if err != nil || n <= 0 {
		return -1
	}
	return int32(n)
}

// containerPort resolves a probe's or Service's target port (a number or a
// port name) against a container.
func containerPort(c *corev1.Container, p intstr.IntOrString) int32 {
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	return -1
}

// problems lists everything wrong with the build; empty when it is fine.
func (m *manifests) problems(known map[string]bool) []string {
	var out []string
	add := func(id, format string, args ...any) { out = append(out, id+": "+fmt.Sprintf(format, args...)) }

	for _, pvc := range m.pvcs {
		if !slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}) {
			add("PersistentVolumeClaim/"+pvc.Name, "accessModes %v, want [ReadWriteOncePod]", pvc.Spec.AccessModes)
		}
	}
	ws := m.workloads()
	if len(ws) == 0 {
		add("build", "no Deployment or StatefulSet")
	}
	proxies := map[string]proxyConfig{}
	claimUsers := map[string][]string{}
	for _, w := range ws {
		pc := proxyOf(w, known)
		proxies[w.id] = pc
		for _, p := range w.extra(pc.cluster) {
			add(w.id, "%s", p)
		}
		switch {
		case pc.cluster && (w.replicas == nil || *w.replicas < 3):
			add(w.id, "cluster mode: replicas must be set to at least 3 (one lost or drained, two carry its shards)")
		case !pc.cluster && (w.replicas == nil || *w.replicas != 1):
			add(w.id, "replicas must be set to exactly 1 (one DATA_DIR, one writer)")
		}
		// Secrets come from Secrets: a literal value is in the manifest, in
		// every copy of it and in the API server's object for all to read.
		for _, x := range pc.allContainers {
			for _, e := range x.Env {
				if secretVariables[e.Name] && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
					add(w.id, "container %s: %s must come from a Secret (secretKeyRef), not a literal value", x.Name, e.Name)
				}
			}
		}
		if pc.containerLookupProblem != "" {
			add(w.id, "%s", pc.containerLookupProblem)
			continue
		}
		for _, p := range pc.configurationProblems {
			add(w.id, "%s", p)
		}
		if pc.listenPort == 0 { // configuration did not parse
			continue
		}
		spec := &w.tmpl.Spec
		c := pc.c

		// Ports: the proxy declares its listeners; nothing else is exposed.
		listeners := []int32{pc.listenPort, pc.ctrlPort}
		if pc.cluster {
			listeners = append(listeners, pc.peerPort)
		}
		for _, want := range listeners {
			if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.ContainerPort == want && p.Name != "" }) {
				add(w.id, "container %s declares no named port %d (from FENCEPROXY_LISTEN / FENCEPROXY_CONTROL_LISTEN / FENCEPROXY_PEER_LISTEN)", c.Name, want)
			}
		}
		if spec.HostNetwork {
			add(w.id, "hostNetwork would expose the backend's localhost port")
		}
		for _, x := range pc.allContainers {
			for _, p := range x.Ports {
				if p.HostPort != 0 {
					add(w.id, "container %s: hostPort %d", x.Name, p.HostPort)
				}
			}
		}
		loopback := pc.upstreamHost == "localhost" || net.ParseIP(pc.upstreamHost).IsLoopback()
		switch {
		case len(pc.otherContainersInPod) > 0 && !loopback:
			add(w.id, "the pod has a backend container, but FENCEPROXY_UPSTREAM %s is not a loopback address", pc.cfg.Upstream)
		case len(pc.otherContainersInPod) == 0 && loopback:
			add(w.id, "FENCEPROXY_UPSTREAM %s is loopback, but the pod has no backend container", pc.cfg.Upstream)
		}
		for _, x := range pc.otherContainersInPod {
			if len(x.Ports) > 0 {
				add(w.id, "container %s declares ports: only fenceproxy may be reachable", x.Name)
			}
			if x.RestartPolicy != nil && *x.RestartPolicy != corev1.ContainerRestartPolicyAlways {
				add(w.id, "init container %s must be a native sidecar (restartPolicy Always) that outlives fenceproxy", x.Name)
			}
		}

		// The kubelet probes, and the control Service reaches, the pod's
		// IP: a loopback-only control listener answers neither. Beyond
		// loopback, fenceproxy starts only with a lease token (or
		// LEASE_OPEN): the Secret key must be there when the pod starts.
		if config.Loopback(pc.cfg.ControlListen) {
			add(w.id, "FENCEPROXY_CONTROL_LISTEN %q is loopback only: the kubelet's probes and the control Service connect to the pod's IP; set it to :%d (with FENCEPROXY_LEASE_TOKEN)", pc.cfg.ControlListen, pc.ctrlPort)
		} else if !pc.cfg.LeaseOpen {
			for _, e := range c.Env {
				if e.Name == config.Prefix+"LEASE_TOKEN" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil &&
					e.ValueFrom.SecretKeyRef.Optional != nil && *e.ValueFrom.SecretKeyRef.Optional {
					add(w.id, "the Secret key of FENCEPROXY_LEASE_TOKEN must not be optional: without it fenceproxy refuses to start with FENCEPROXY_CONTROL_LISTEN %q (or set FENCEPROXY_LEASE_OPEN=true)", pc.cfg.ControlListen)
				}
			}
		}

		// Probes on the control listener.
		for _, pr := range []struct {
			kind, path string
			probe      *corev1.Probe
		}{{"livenessProbe", "/healthz", c.LivenessProbe}, {"readinessProbe", "/readyz", c.ReadinessProbe}} {
			switch {
			case pr.probe == nil || pr.probe.HTTPGet == nil:
				add(w.id, "%s must be an httpGet of %s", pr.kind, pr.path)
			case pr.probe.HTTPGet.Path != pr.path:
				add(w.id, "%s path %q, want %s", pr.kind, pr.probe.HTTPGet.Path, pr.path)
			case containerPort(c, pr.probe.HTTPGet.Port) != pc.ctrlPort:
				add(w.id, "%s %s port %s is not the control port %d", pr.kind, pr.path, pr.probe.HTTPGet.Port.String(), pc.ctrlPort)
			case schemeOf(pr.probe.HTTPGet.Scheme) != controlScheme(pc):
				add(w.id, "%s scheme %s: the control listener speaks %s", pr.kind, schemeOf(pr.probe.HTTPGet.Scheme), controlScheme(pc))
			}
		}

		if pc.cluster {
			for _, p := range m.clusterProblems(w, pc) {
				add(w.id, "%s", p)
			}
		} else {
			// DATA_DIR on a writable mount of a ReadWriteOncePod claim of this build.
			var mount *corev1.VolumeMount
			for i, vm := range c.VolumeMounts {
				if rel, err := filepath.Rel(filepath.Clean(vm.MountPath), pc.dataDir); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
					mount = &c.VolumeMounts[i]
				}
			}
			switch {
			case mount == nil:
				add(w.id, "FENCEPROXY_DATA_DIR %s is not on a mounted volume (the root filesystem is read-only and not durable)", pc.dataDir)
			case mount.ReadOnly:
				add(w.id, "the volume of FENCEPROXY_DATA_DIR is mounted read-only")
			default:
				claim := w.claim(mount.Name)
				if claim == nil {
					add(w.id, "FENCEPROXY_DATA_DIR's volume %s is not a PersistentVolumeClaim of this build", mount.Name)
				} else if !slices.Equal(claim.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}) {
					add(w.id, "FENCEPROXY_DATA_DIR's claim has accessModes %v, want [ReadWriteOncePod]", claim.AccessModes)
				}
				for _, v := range spec.Volumes {
					if v.Name == mount.Name && v.PersistentVolumeClaim != nil {
						claimUsers[v.PersistentVolumeClaim.ClaimName] = append(claimUsers[v.PersistentVolumeClaim.ClaimName], w.id)
					}
				}
			}
		}

		for _, name := range slices.Sorted(maps.Keys(pc.files)) {
			for _, p := range secretFileProblems(spec, c, name, pc.files[name]) {
				add(w.id, "%s", p)
			}
		}
		if pc.cfg.S3 == "resign" {
			for _, p := range m.resignProblems(spec, pc) {
				add(w.id, "%s", p)
			}
		}

		// Security context, effective per container.
		psc := spec.SecurityContext
		if psc == nil {
			psc = &corev1.PodSecurityContext{}
		}
		if psc.FSGroup == nil || *psc.FSGroup != imageUID {
			add(w.id, "securityContext.fsGroup must be %d so that the volume is writable", imageUID)
		}
		for _, x := range pc.allContainers {
			sc := x.SecurityContext
			if sc == nil {
				sc = &corev1.SecurityContext{}
			}
			nonRoot, uid, seccomp := psc.RunAsNonRoot, psc.RunAsUser, psc.SeccompProfile
			if sc.RunAsNonRoot != nil {
				nonRoot = sc.RunAsNonRoot
			}
			if sc.RunAsUser != nil {
				uid = sc.RunAsUser
			}
			if sc.SeccompProfile != nil {
				seccomp = sc.SeccompProfile
			}
			if nonRoot == nil || !*nonRoot {
				add(w.id, "container %s: runAsNonRoot must be true", x.Name)
			}
			if uid == nil || *uid != imageUID {
				add(w.id, "container %s: runAsUser must be %d", x.Name, imageUID)
			}
			if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
				add(w.id, "container %s: seccompProfile must be RuntimeDefault", x.Name)
			}
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				add(w.id, "container %s: allowPrivilegeEscalation must be false", x.Name)
			}
			if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				add(w.id, "container %s: readOnlyRootFilesystem must be true", x.Name)
			}
			if sc.Privileged != nil && *sc.Privileged {
				add(w.id, "container %s: privileged", x.Name)
			}
			if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
				add(w.id, "container %s: capabilities must drop ALL and add none", x.Name)
			}
			// Resources: requests and limits for CPU and memory.
			for _, rn := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				req, okReq := x.Resources.Requests[rn]
				lim, okLim := x.Resources.Limits[rn]
				switch {
				case !okReq || !okLim:
					add(w.id, "container %s: %s needs a request and a limit", x.Name, rn)
				case req.Cmp(lim) > 0:
					add(w.id, "container %s: %s request %s above its limit %s", x.Name, rn, req.String(), lim.String())
				}
			}
		}

		// Graceful stop: preStop sleep, then SIGTERM and up to SHUTDOWN_TIMEOUT of drain.
		var preStop time.Duration
		switch lc := c.Lifecycle; {
		case lc == nil || lc.PreStop == nil || lc.PreStop.Sleep == nil:
			add(w.id, "container %s needs a preStop sleep handler (the image has no shell for an exec sleep)", c.Name)
		default:
			preStop = time.Duration(lc.PreStop.Sleep.Seconds) * time.Second
			if preStop <= 0 {
				add(w.id, "preStop sleep must be positive")
			}
		}
		if g := spec.TerminationGracePeriodSeconds; !pc.cluster && (g == nil || time.Duration(*g)*time.Second <= preStop+pc.shutdown) {
			add(w.id, "terminationGracePeriodSeconds must exceed the preStop sleep (%s) + FENCEPROXY_SHUTDOWN_TIMEOUT (%s)", preStop, pc.shutdown)
		}
		// In cluster mode the shards are handed over too, each drained for up
		// to FENCEPROXY_DRAIN_TIMEOUT; a replica killed before it handed a shard
		// over makes that shard wait SHARD_TTL + LOCK_DELAY.
		if g := spec.TerminationGracePeriodSeconds; pc.cluster && (g == nil || time.Duration(*g)*time.Second <= preStop+pc.shutdown+pc.drain) {
			add(w.id, "terminationGracePeriodSeconds must exceed the preStop sleep (%s) + FENCEPROXY_SHUTDOWN_TIMEOUT (%s) + the handover's FENCEPROXY_DRAIN_TIMEOUT (%s)", preStop, pc.shutdown, pc.drain)
		}
	}
	for claim, users := range claimUsers {
		if len(users) > 1 {
			add("PersistentVolumeClaim/"+claim, "used as DATA_DIR by %v: one DATA_DIR, one writer", users)
		}
	}

	// Services: each selects one workload and targets only its proxy or its
	// control listener; every workload has both, on separate Services.
	exposed := map[string]map[string]bool{} // workload -> "proxy"/"control"
	for _, s := range m.services {
		id := "Service/" + s.Name
		var matched []workload
		for _, w := range ws {
			if len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(w.tmpl.Labels)) {
				matched = append(matched, w)
			}
		}
		if len(matched) != 1 {
			add(id, "selects %d workloads, want exactly one", len(matched))
			continue
		}
		w := matched[0]
		pc := proxies[w.id]
		if pc.c == nil || pc.listenPort == 0 {
			continue
		}
		roles := map[string]bool{}
		for _, p := range s.Spec.Ports {
			if p.Name == "" {
				add(id, "port %d must be named", p.Port)
			}
			target := p.TargetPort
			if target.Type == intstr.Int && target.IntVal == 0 {
				target = intstr.FromInt32(p.Port)
			}
			switch tp := containerPort(pc.c, target); {
			case tp == pc.listenPort:
				roles["proxy"] = true
			case tp == pc.ctrlPort:
				roles["control"] = true
			case pc.cluster && tp == pc.peerPort:
				add(id, "port %s targets the peer listener %d of %s, which takes forwarded writes on a shared secret: only the replicas reach it, at their pod IPs", p.Name, pc.peerPort, w.id)
			default:
				add(id, "port %s targets %s, which is neither FENCEPROXY_LISTEN (%d) nor FENCEPROXY_CONTROL_LISTEN (%d) of %s", p.Name, target.String(), pc.listenPort, pc.ctrlPort, w.id)
			}
		}
		if roles["proxy"] && roles["control"] {
			add(id, "exposes the proxy and the control listener together; the control port belongs on its own Service")
		}
		if roles["control"] && ((s.Spec.Type != "" && s.Spec.Type != corev1.ServiceTypeClusterIP) || len(s.Spec.ExternalIPs) > 0) {
			add(id, "the control listener must stay cluster-internal (type ClusterIP, no externalIPs)")
		}
		if exposed[w.id] == nil {
			exposed[w.id] = map[string]bool{}
		}
		for r := range roles {
			exposed[w.id][r] = true
		}
	}
	for _, w := range ws {
		for _, r := range []string{"proxy", "control"} {
			if !exposed[w.id][r] {
				add(w.id, "no Service exposes its %s listener", r)
			}
		}
	}
	out = append(out, m.policyProblems(ws, proxies)...)
	out = append(out, m.secretKeyProblems(ws)...)
	out = append(out, m.serviceMonitorProblems(ws, proxies)...)
	slices.Sort(out)
	return out
}

// secretKeyProblems checks the secretKeyRefs of every container that name a
// Secret of this build: the key is in it.
func (m *manifests) secretKeyProblems(ws []workload) []string {
	var out []string
	for _, w := range ws {
		spec := &w.tmpl.Spec
		for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
			for _, e := range c.Env {
				if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
					continue
				}
				ref := e.ValueFrom.SecretKeyRef
				for _, s := range m.secrets {
					_, inData := s.Data[ref.Key]
					_, inString := s.StringData[ref.Key]
					if s.Name == ref.Name && !inData && !inString {
						out = append(out, fmt.Sprintf("%s: container %s: %s names key %s of Secret/%s, which has no such key", w.id, c.Name, e.Name, ref.Key, s.Name))
					}
				}
			}
		}
	}
	return out
}

// serviceMonitorProblems checks each ServiceMonitor: it selects Services of
// this build that expose only a control listener, and scrapes /metrics on
// their control port in the scheme that listener speaks.
func (m *manifests) serviceMonitorProblems(ws []workload, proxies map[string]proxyConfig) []string {
	var out []string
	for _, sm := range m.serviceMonitors {
		add := func(format string, args ...any) {
			out = append(out, "ServiceMonitor/"+sm.GetName()+": "+fmt.Sprintf(format, args...))
		}
		if ns, found, _ := unstructured.NestedFieldNoCopy(sm.Object, "spec", "namespaceSelector"); found && ns != nil {
			add("namespaceSelector %v: the Services are in the ServiceMonitor's own namespace", ns)
		}
		matchLabels, _, err := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
		if err != nil || len(matchLabels) == 0 {
			add("spec.selector.matchLabels must select the control Service (%v)", err)
			continue
		}
		var selected []*corev1.Service
		for _, s := range m.services {
			if labels.SelectorFromSet(matchLabels).Matches(labels.Set(s.Labels)) {
				selected = append(selected, s)
			}
		}
		if len(selected) == 0 {
			add("selects no Service of this build")
		}
		endpoints, _, err := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		if err != nil || len(endpoints) == 0 {
			add("no endpoints")
		}
		for _, s := range selected {
			var pc proxyConfig
			for _, w := range ws {
				if len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(w.tmpl.Labels)) {
					pc = proxies[w.id]
				}
			}
			if pc.c == nil || pc.listenPort == 0 {
				add("Service %s selects no checked workload", s.Name)
				continue
			}
			for _, p := range s.Spec.Ports {
				if containerPort(pc.c, p.TargetPort) != pc.ctrlPort {
					add("selects Service %s, whose port %s is not the control listener: Prometheus would scrape it too", s.Name, p.Name)
				}
			}
			for i, ep := range endpoints {
				e, _ := ep.(map[string]any)
				port, _ := e["port"].(string)
				path, _ := e["path"].(string)
				scheme, _ := e["scheme"].(string)
				if !slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == port && port != "" }) {
					add("endpoint %d: port %q is not a port name of Service %s", i, port, s.Name)
				}
				if path != "/metrics" {
					add("endpoint %d: path %q, want /metrics", i, path)
				}
				if want := strings.ToLower(string(controlScheme(pc))); strings.ToLower(cmp.Or(scheme, "http")) != want {
					add("endpoint %d: scheme %q, but the control listener speaks %s", i, scheme, want)
				}
			}
		}
	}
	return out
}

// schemeOf is a probe's scheme, HTTP when unset.
func schemeOf(s corev1.URIScheme) corev1.URIScheme {
	if s == "" {
		return corev1.URISchemeHTTP
	}
	return s
}

// controlScheme is what the control listener speaks: HTTPS with
// FENCEPROXY_CONTROL_TLS_CERT_FILE, else plain HTTP.
func controlScheme(pc proxyConfig) corev1.URIScheme {
	if pc.cfg.ControlTLSCertFile != "" {
		return corev1.URISchemeHTTPS
	}
	return corev1.URISchemeHTTP
}

// secretVariables are the variables whose values are secrets.
var secretVariables = map[string]bool{
	config.Prefix + "ADMIN_TOKEN":   true,
	config.Prefix + "LEASE_TOKEN":   true,
	config.Prefix + "TOKEN_KEY":     true,
	config.Prefix + "ETCD_USERNAME": true,
	config.Prefix + "ETCD_PASSWORD": true,
	config.Prefix + "PEER_SECRET":   true,
}

// clusterProblems checks cluster mode (FENCEPROXY_STORE=etcd), where the
// maxima live in etcd and several replicas share them: the pod keeps no state
// (no DATA_DIR, no volume but Secrets); each replica has its own id, from its
// pod's name, and advertises its own pod IP with the peer listener's port; the
// etcd endpoints and the peer secret come from a Secret the pod cannot start
// without; a PodDisruptionBudget lets at most one replica go at a time; the
// replicas prefer distinct nodes.
func (m *manifests) clusterProblems(w workload, pc proxyConfig) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	spec := &w.tmpl.Spec
	env := map[string]corev1.EnvVar{}
	var order []string
	for _, e := range pc.c.Env {
		env[e.Name] = e
		order = append(order, e.Name)
	}
	if _, ok := env[config.Prefix+"DATA_DIR"]; ok {
		add("cluster mode: FENCEPROXY_DATA_DIR is set; the maxima live in etcd and a pod keeps no state")
	}
	for _, v := range spec.Volumes {
		if v.Secret == nil {
			add("cluster mode: volume %s: a cluster pod keeps no state (only Secret volumes, e.g. etcd's TLS files)", v.Name)
		}
	}
	if len(m.pvcs) > 0 {
		add("cluster mode: the build has PersistentVolumeClaims")
	}

	// Identity: the pod's name, never a literal (every replica would share it).
	if e, ok := env[config.Prefix+"REPLICA_ID"]; !ok || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		add("cluster mode: FENCEPROXY_REPLICA_ID must come from the pod's metadata.name (downward API): unique among the live replicas")
	}
	// PEER_ADVERTISE: $(V):port, V the pod's IP from the downward API (set
	// before it, or the kubelet does not expand it), port the peer listener's.
	adv, ok := env[config.Prefix+"PEER_ADVERTISE"]
	host, port, _ := strings.Cut(adv.Value, "):")
	ref := strings.TrimPrefix(host, "$(")
	ipVar, defined := env[ref]
	switch {
	case !ok || adv.ValueFrom != nil:
		add("cluster mode: FENCEPROXY_PEER_ADVERTISE must be set as $(POD_IP):<peer port>")
	case !strings.HasPrefix(host, "$(") || !defined || slices.Index(order, ref) > slices.Index(order, adv.Name) ||
		ipVar.ValueFrom == nil || ipVar.ValueFrom.FieldRef == nil || ipVar.ValueFrom.FieldRef.FieldPath != "status.podIP":
		add("cluster mode: FENCEPROXY_PEER_ADVERTISE %q must be $(V):<peer port>, V a variable set before it from status.podIP (each replica its own address)", adv.Value)
	case portOf(":"+port) != pc.peerPort:
		add("cluster mode: FENCEPROXY_PEER_ADVERTISE %q does not name the peer listener's port %d (FENCEPROXY_PEER_LISTEN)", adv.Value, pc.peerPort)
	}
	// Required Secret values: without them the pod must not start.
	for _, name := range []string{"ETCD_ENDPOINTS", "PEER_SECRET"} {
		e, ok := env[config.Prefix+name]
		switch {
		case !ok:
			add("cluster mode: FENCEPROXY_%s is not set", name)
		case e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil:
			add("cluster mode: FENCEPROXY_%s must come from a Secret (secretKeyRef)", name)
		case e.ValueFrom.SecretKeyRef.Optional != nil && *e.ValueFrom.SecretKeyRef.Optional:
			add("cluster mode: the Secret key of FENCEPROXY_%s must not be optional", name)
		}
	}

	// At most one replica voluntarily disrupted at a time.
	replicas := int32(1)
	if w.replicas != nil {
		replicas = *w.replicas
	}
	var budgets int
	for _, b := range m.budgets {
		if b.Spec.Selector == nil || !selects(b.Spec.Selector, w.tmpl.Labels) {
			continue
		}
		budgets++
		switch sp := b.Spec; {
		case sp.MaxUnavailable != nil && sp.MinAvailable == nil && sp.MaxUnavailable.Type == intstr.Int && sp.MaxUnavailable.IntVal == 1:
		case sp.MinAvailable != nil && sp.MaxUnavailable == nil && sp.MinAvailable.Type == intstr.Int && sp.MinAvailable.IntVal == replicas-1:
		default:
			add("PodDisruptionBudget %s must be maxUnavailable: 1 or minAvailable: %d (replicas - 1)", b.Name, replicas-1)
		}
	}
	if budgets != 1 {
		add("cluster mode: %d PodDisruptionBudgets select its pods, want 1", budgets)
	}

	// Replicas on distinct nodes when possible.
	spread := false
	if a := spec.Affinity; a != nil && a.PodAntiAffinity != nil {
		terms := a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
		for _, wt := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, wt.PodAffinityTerm)
		}
		for _, t := range terms {
			if t.TopologyKey == "kubernetes.io/hostname" && selects(t.LabelSelector, w.tmpl.Labels) {
				spread = true
			}
		}
	}
	if !spread {
		add("cluster mode: no pod anti-affinity on kubernetes.io/hostname over its own pods (one node could carry every replica)")
	}
	return out
}

// resignProblems checks S3 gateway mode (FENCEPROXY_S3=resign): the store is
// reached over HTTPS (the proxy sends the store's signatures and every body);
// the pod runs as a ServiceAccount of the build (the store's credentials:
// IRSA, Pod Identity). The workers' credentials file is checked with the
// other files from Secrets (secretFileProblems).
func (m *manifests) resignProblems(spec *corev1.PodSpec, pc proxyConfig) []string {
	var out []string
	if pc.cfg.Upstream.Scheme != "https" {
		out = append(out, fmt.Sprintf("S3 resign mode: FENCEPROXY_UPSTREAM %s is not https (the store's signatures and bodies would cross the network in clear)", pc.cfg.Upstream))
	}
	if spec.ServiceAccountName == "" || !slices.ContainsFunc(m.accounts, func(a *corev1.ServiceAccount) bool { return a.Name == spec.ServiceAccountName }) {
		out = append(out, fmt.Sprintf("S3 resign mode: serviceAccountName %q must name a ServiceAccount of this build (the store's credentials: IRSA, Pod Identity)", spec.ServiceAccountName))
	}
	return out
}

// secretFileProblems checks a file the pod reads (a variable of
// fileStandIns): it is inside a directory mounted read-only from a Secret
// that is not optional, and not mounted with subPath (such a mount never sees
// the Secret's updates: a removed S3 key would stay valid, a renewed
// certificate unseen, until a restart).
func secretFileProblems(spec *corev1.PodSpec, c *corev1.Container, variable, file string) []string {
	file = filepath.Clean(file)
	var mount *corev1.VolumeMount
	for i, vm := range c.VolumeMounts {
		rel, err := filepath.Rel(filepath.Clean(vm.MountPath), file)
		inside := err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../")
		fileMount := err == nil && rel == "." && (vm.SubPath != "" || vm.SubPathExpr != "")
		if inside || fileMount {
			mount = &c.VolumeMounts[i]
		}
	}
	var secret *corev1.SecretVolumeSource
	if mount != nil {
		for _, v := range spec.Volumes {
			if v.Name == mount.Name {
				secret = v.Secret
			}
		}
	}
	switch {
	case mount == nil:
		return []string{fmt.Sprintf("%s %s is not inside a mounted volume", variable, file)}
	case secret == nil:
		return []string{fmt.Sprintf("%s's volume %s is not a Secret", variable, mount.Name)}
	case mount.SubPath != "" || mount.SubPathExpr != "":
		return []string{fmt.Sprintf("%s's volume %s is mounted with a subPath, which never sees the Secret's updates (a removed key would stay valid)", variable, mount.Name)}
	case !mount.ReadOnly:
		return []string{fmt.Sprintf("%s's volume %s must be mounted readOnly", variable, mount.Name)}
	case secret.Optional != nil && *secret.Optional:
		return []string{fmt.Sprintf("the Secret %s of %s must not be optional (the pod would start without it)", secret.SecretName, variable)}
	}
	return nil
}

// Labels of the NetworkPolicies' peers (deploy/k8s/README.md, "NetworkPolicy").
const (
	clientLabel        = "fenceproxy.io/client"         // may reach the proxy port
	controlClientLabel = "fenceproxy.io/control-client" // may reach the control port
	metricsNamespace   = "monitoring"                   // Prometheus's namespace
)

// source is a pod that may try to connect to fenceproxy, and what the
// NetworkPolicies must let it reach.
type source struct {
	name           string
	sameNamespace  bool              // in the namespace of fenceproxy's pod
	namespace      map[string]string // its namespace's labels
	labels         map[string]string
	proxy, control bool // must reach the proxy port; the control port
	peer           bool // cluster mode: must reach the peer port
}

// sources covers each kind of peer the policies admit and the ones they must not.
var sources = []source{
	{name: "a " + clientLabel + " pod", sameNamespace: true, namespace: nsLabels("storage"),
		labels: map[string]string{clientLabel: "true"}, proxy: true},
	{name: "a " + controlClientLabel + " pod", sameNamespace: true, namespace: nsLabels("storage"),
		labels: map[string]string{controlClientLabel: "true"}, control: true},
	{name: "Prometheus in namespace " + metricsNamespace, namespace: nsLabels(metricsNamespace),
		labels: map[string]string{"app.kubernetes.io/name": "prometheus"}, control: true},
	{name: "an unlabelled pod of the namespace", sameNamespace: true, namespace: nsLabels("storage"),
		labels: map[string]string{"app.kubernetes.io/name": "something-else"}},
	{name: "a pod of another namespace with both client labels", namespace: nsLabels("elsewhere"),
		labels: map[string]string{clientLabel: "true", controlClientLabel: "true"}},
	{name: "a pod of namespace " + metricsNamespace + " that is not Prometheus", namespace: nsLabels(metricsNamespace),
		labels: map[string]string{"app.kubernetes.io/name": "grafana"}},
}

func nsLabels(name string) map[string]string {
	return map[string]string{"kubernetes.io/metadata.name": name}
}

// selects reports whether a label selector matches set; a nil or invalid
// selector matches nothing.
func selects(sel *metav1.LabelSelector, set map[string]string) bool {
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && s.Matches(labels.Set(set))
}

// isolatesIngress reports whether a policy restricts ingress (policyTypes
// defaults to Ingress when empty).
func isolatesIngress(np *networkingv1.NetworkPolicy) bool {
	return len(np.Spec.PolicyTypes) == 0 || slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
}

// peerAdmits reports whether a peer admits src. An ipBlock is taken to admit
// any pod (pod IPs are not known here), the safe side for these checks.
func peerAdmits(p networkingv1.NetworkPolicyPeer, src source) bool {
	switch {
	case p.IPBlock != nil:
		return true
	case p.NamespaceSelector == nil:
		return src.sameNamespace && selects(p.PodSelector, src.labels)
	default:
		return selects(p.NamespaceSelector, src.namespace) && (p.PodSelector == nil || selects(p.PodSelector, src.labels))
	}
}

// rulePorts resolves a rule's ports against the proxy container; nil with
// all=true when the rule admits every port.
func rulePorts(c *corev1.Container, rule networkingv1.NetworkPolicyIngressRule) (ports []int32, all bool) {
	if len(rule.Ports) == 0 {
		return nil, true
	}
	for _, p := range rule.Ports {
		if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
			continue // HTTP is TCP
		}
		if p.Port == nil {
			return nil, true
		}
		n := containerPort(c, *p.Port)
		if p.EndPort != nil && p.Port.Type == intstr.Int {
			for q := n; q <= *p.EndPort; q++ {
				ports = append(ports, q)
			}
			continue
		}
		ports = append(ports, n)
	}
	return ports, false
}

// policyProblems checks the NetworkPolicies: each selects a workload of the
// build; each workload's pods are isolated for ingress; rules name ports, and
// only the proxy and control ports; and each kind of source reaches exactly
// what it should (the control port never from an unlabelled pod).
func (m *manifests) policyProblems(ws []workload, proxies map[string]proxyConfig) []string {
	var out []string
	add := func(id, format string, args ...any) { out = append(out, id+": "+fmt.Sprintf(format, args...)) }
	for _, np := range m.policies {
		if !slices.ContainsFunc(ws, func(w workload) bool { return selects(&np.Spec.PodSelector, w.tmpl.Labels) }) {
			add("NetworkPolicy/"+np.Name, "selects no workload of this build (its pods would stay open)")
		}
	}
	for _, w := range ws {
		pc := proxies[w.id]
		if pc.c == nil || pc.listenPort == 0 {
			continue
		}
		var policies []*networkingv1.NetworkPolicy
		for _, np := range m.policies {
			if isolatesIngress(np) && selects(&np.Spec.PodSelector, w.tmpl.Labels) {
				policies = append(policies, np)
			}
		}
		if len(policies) == 0 {
			add(w.id, "no NetworkPolicy isolates its pods for ingress: every pod, and with a LoadBalancer anyone, reaches the control port")
			continue
		}
		// In cluster mode the peer port too, from the workload's own pods
		// only: a replica of it is one more source.
		srcs := sources
		if pc.cluster {
			srcs = append(slices.Clone(sources), source{name: "a replica of " + w.id, sameNamespace: true,
				namespace: nsLabels("storage"), labels: w.tmpl.Labels, peer: true})
		}
		// reach[source][port]: some rule admits the source on the port.
		reach := map[string]map[int32]bool{}
		for _, np := range policies {
			id := "NetworkPolicy/" + np.Name
			for i, rule := range np.Spec.Ingress {
				ports, all := rulePorts(pc.c, rule)
				if all {
					add(id, "ingress rule %d admits every port; name the proxy or control port", i)
				}
				for _, p := range ports {
					if p != pc.listenPort && p != pc.ctrlPort && (!pc.cluster || p != pc.peerPort) {
						add(id, "ingress rule %d admits port %d, which is neither FENCEPROXY_LISTEN (%d) nor FENCEPROXY_CONTROL_LISTEN (%d) of %s", i, p, pc.listenPort, pc.ctrlPort, w.id)
					}
				}
				if all {
					ports = []int32{pc.listenPort, pc.ctrlPort}
					if pc.cluster {
						ports = append(ports, pc.peerPort)
					}
				}
				for _, src := range srcs {
					if len(rule.From) > 0 && !slices.ContainsFunc(rule.From, func(p networkingv1.NetworkPolicyPeer) bool { return peerAdmits(p, src) }) {
						continue
					}
					if reach[src.name] == nil {
						reach[src.name] = map[int32]bool{}
					}
					for _, p := range ports {
						reach[src.name][p] = true
					}
				}
			}
		}
		for _, src := range srcs {
			checked := []struct {
				name string
				n    int32
				want bool
			}{{"proxy", pc.listenPort, src.proxy}, {"control", pc.ctrlPort, src.control}}
			if pc.cluster {
				checked = append(checked, struct {
					name string
					n    int32
					want bool
				}{"peer", pc.peerPort, src.peer})
			}
			for _, port := range checked {
				switch got := reach[src.name][port.n]; {
				case got && !port.want:
					add(w.id, "%s can reach the %s port %d; it must not", src.name, port.name, port.n)
				case !got && port.want:
					add(w.id, "%s cannot reach the %s port %d", src.name, port.name, port.n)
				}
			}
		}
	}
	return out
}

func TestKustomizationsBuildAndPass(t *testing.T) {
	known := knownVariables(t)
	for _, tc := range []struct {
		dir                                string
		deployments, statefulSet, policies int
	}{
		{"k8s", 1, 1, 2},
		{"k8s/sidecar", 1, 0, 1},
		{"k8s/gateway", 0, 1, 1},
		{"k8s/gateway-resign", 0, 1, 1},
		{"k8s/cluster", 1, 0, 1},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			m := build(t, tc.dir)
			if len(m.deployments) != tc.deployments || len(m.statefulSets) != tc.statefulSet || len(m.policies) != tc.policies {
				t.Fatalf("%d Deployments, %d StatefulSets and %d NetworkPolicies, want %d, %d and %d",
					len(m.deployments), len(m.statefulSets), len(m.policies), tc.deployments, tc.statefulSet, tc.policies)
			}
			for _, p := range m.problems(known) {
				t.Error(p)
			}
			t.Logf("%d Deployment(s), %d StatefulSet(s), %d Service(s), %d PersistentVolumeClaim(s), %d NetworkPolicy(ies)",
				len(m.deployments), len(m.statefulSets), len(m.services), len(m.pvcs), len(m.policies))
		})
	}
}

// TestLeaseOpenOverlay: the opt-out the manifests' comments describe, the
// lease token replaced by FENCEPROXY_LEASE_OPEN=true, passes every check.
func TestLeaseOpenOverlay(t *testing.T) {
	known := knownVariables(t)
	for _, dir := range []string{"k8s/sidecar", "k8s/gateway", "k8s/cluster"} {
		t.Run(dir, func(t *testing.T) {
			m := build(t, dir)
			ws := m.workloads()
			c := proxyOf(ws[0], known).c
			i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == config.Prefix+"LEASE_TOKEN" })
			if i < 0 {
				t.Fatal("no FENCEPROXY_LEASE_TOKEN")
			}
			c.Env[i] = corev1.EnvVar{Name: config.Prefix + "LEASE_OPEN", Value: "true"}
			for _, p := range m.problems(known) {
				t.Error(p)
			}
		})
	}
}

// TestChecksCatchMistakes breaks the manifests one way at a time and expects
// the checks above to name the mistake: they are not vacuous.
func TestChecksCatchMistakes(t *testing.T) {
	known := knownVariables(t)
	proxy := func(m *manifests, sts bool) *corev1.Container {
		tmpl := &m.deployments[0].Spec.Template
		if sts {
			tmpl = &m.statefulSets[0].Spec.Template
		}
		for i := range tmpl.Spec.Containers {
			if tmpl.Spec.Containers[i].Name == proxyContainerName {
				return &tmpl.Spec.Containers[i]
			}
		}
		t.Fatal("no proxy container")
		return nil
	}
	policy := func(m *manifests, name string) *networkingv1.NetworkPolicy {
		for _, np := range m.policies {
			if np.Name == name {
				return np
			}
		}
		t.Fatalf("no NetworkPolicy %s", name)
		return nil
	}
	// rule returns the ingress rule of a policy whose first peer's pod
	// selector has the label key.
	rule := func(m *manifests, name, labelKey string) *networkingv1.NetworkPolicyIngressRule {
		np := policy(m, name)
		for i, r := range np.Spec.Ingress {
			if len(r.From) > 0 && r.From[0].PodSelector != nil {
				if _, ok := r.From[0].PodSelector.MatchLabels[labelKey]; ok {
					return &np.Spec.Ingress[i]
				}
			}
		}
		t.Fatalf("NetworkPolicy %s has no rule for pods with label %s", name, labelKey)
		return nil
	}
	setEnv := func(c *corev1.Container, name, value string) {
		for i := range c.Env {
			if c.Env[i].Name == name {
				c.Env[i].Value = value
				return
			}
		}
		c.Env = append(c.Env, corev1.EnvVar{Name: name, Value: value})
	}
	for _, tc := range []struct {
		name, want string
		breakIt    func(m *manifests)
	}{
		{"rolling update", "must be Recreate", func(m *manifests) {
			m.deployments[0].Spec.Strategy.Type = appsv1.RollingUpdateDeploymentStrategyType
		}},
		{"two replicas", "replicas must be set to exactly 1", func(m *manifests) {
			two := int32(2)
			m.statefulSets[0].Spec.Replicas = &two
		}},
		{"ReadWriteOnce claim", "want [ReadWriteOncePod]", func(m *manifests) {
			m.pvcs[0].Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
		}},
		{"ReadWriteOnce claim template", "want [ReadWriteOncePod]", func(m *manifests) {
			m.statefulSets[0].Spec.VolumeClaimTemplates[0].Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
		}},
		{"misspelt variable", "unknown variable FENCEPROXY_SHUTDOWN_TIMOUT", func(m *manifests) {
			c := proxy(m, false)
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "FENCEPROXY_SHUTDOWN_TIMEOUT" })
			setEnv(c, "FENCEPROXY_SHUTDOWN_TIMOUT", "30s")
		}},
		{"liveness on the proxy port", "is not the control port", func(m *manifests) {
			proxy(m, true).LivenessProbe.HTTPGet.Port = intstr.FromString("http")
		}},
		{"readiness on /healthz", `readinessProbe path "/healthz"`, func(m *manifests) {
			proxy(m, false).ReadinessProbe.HTTPGet.Path = "/healthz"
		}},
		{"control listener moved", "is not the control port 9191", func(m *manifests) {
			setEnv(proxy(m, false), "FENCEPROXY_CONTROL_LISTEN", ":9191")
		}},
		{"control listener on loopback", `FENCEPROXY_CONTROL_LISTEN "127.0.0.1:9090" is loopback only`, func(m *manifests) {
			setEnv(proxy(m, true), "FENCEPROXY_CONTROL_LISTEN", "127.0.0.1:9090")
		}},
		{"control listener left to its default", `FENCEPROXY_CONTROL_LISTEN "127.0.0.1:9090" is loopback only`, func(m *manifests) {
			c := proxy(m, false)
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "FENCEPROXY_CONTROL_LISTEN" })
		}},
		{"optional lease token", "the Secret key of FENCEPROXY_LEASE_TOKEN must not be optional", func(m *manifests) {
			yes := true
			for i, e := range proxy(m, true).Env {
				if e.Name == "FENCEPROXY_LEASE_TOKEN" {
					proxy(m, true).Env[i].ValueFrom.SecretKeyRef.Optional = &yes
				}
			}
		}},
		{"no lease token", `FENCEPROXY_CONTROL_LISTEN: ":9090" listens beyond loopback, and no FENCEPROXY_LEASE_TOKEN`, func(m *manifests) {
			c := proxy(m, false)
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "FENCEPROXY_LEASE_TOKEN" })
		}},
		{"service on the backend port", "neither FENCEPROXY_LISTEN", func(m *manifests) {
			m.service("fenced-backend").Spec.Ports[0].TargetPort = intstr.FromInt32(9000)
		}},
		{"backend declares a port", "only fenceproxy may be reachable", func(m *manifests) {
			b := &m.deployments[0].Spec.Template.Spec.InitContainers[0]
			b.Ports = append(b.Ports, corev1.ContainerPort{Name: "s3", ContainerPort: 9000})
		}},
		{"control port on a LoadBalancer", "must stay cluster-internal", func(m *manifests) {
			s := m.service("fenceproxy-gateway")
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "control", Port: 9090, TargetPort: intstr.FromString("control")})
		}},
		{"data dir off the volume", "is not on a mounted volume", func(m *manifests) {
			setEnv(proxy(m, true), "FENCEPROXY_DATA_DIR", "/data")
		}},
		{"short grace period", "terminationGracePeriodSeconds must exceed", func(m *manifests) {
			g := int64(35)
			m.statefulSets[0].Spec.Template.Spec.TerminationGracePeriodSeconds = &g
		}},
		{"longer shutdown timeout", "terminationGracePeriodSeconds must exceed", func(m *manifests) {
			setEnv(proxy(m, false), "FENCEPROXY_SHUTDOWN_TIMEOUT", "2m")
		}},
		{"writable root", "readOnlyRootFilesystem must be true", func(m *manifests) {
			f := false
			proxy(m, true).SecurityContext.ReadOnlyRootFilesystem = &f
		}},
		{"root user", "runAsUser must be 65532", func(m *manifests) {
			root := int64(0)
			m.deployments[0].Spec.Template.Spec.SecurityContext.RunAsUser = &root
		}},
		{"no fsGroup", "fsGroup must be 65532", func(m *manifests) {
			m.statefulSets[0].Spec.Template.Spec.SecurityContext.FSGroup = nil
		}},
		{"capabilities kept", "capabilities must drop ALL", func(m *manifests) {
			m.deployments[0].Spec.Template.Spec.InitContainers[0].SecurityContext.Capabilities = nil
		}},
		{"no memory limit", "memory needs a request and a limit", func(m *manifests) {
			delete(proxy(m, true).Resources.Limits, corev1.ResourceMemory)
		}},
		{"bad upstream", "FENCEPROXY_UPSTREAM", func(m *manifests) {
			setEnv(proxy(m, true), "FENCEPROXY_UPSTREAM", "objectstore.example.com")
		}},
		{"sidecar upstream off the pod", "is not a loopback address", func(m *manifests) {
			setEnv(proxy(m, false), "FENCEPROXY_UPSTREAM", "http://backend.example:9000")
		}},
		{"no network policy", "no NetworkPolicy isolates its pods", func(m *manifests) {
			m.policies = nil
		}},
		{"egress-only policy", "no NetworkPolicy isolates its pods", func(m *manifests) {
			policy(m, "fenceproxy-gateway").Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
		}},
		{"policy selects nothing", "selects no workload of this build", func(m *manifests) {
			policy(m, "fenced-backend").Spec.PodSelector.MatchLabels["app.kubernetes.io/instance"] = "fenced-backnd"
		}},
		{"control port open to every source", "an unlabelled pod of the namespace can reach the control port 9090", func(m *manifests) {
			rule(m, "fenceproxy-gateway", controlClientLabel).From = nil
		}},
		{"control port open to the whole namespace", "an unlabelled pod of the namespace can reach the control port 9090", func(m *manifests) {
			rule(m, "fenced-backend", controlClientLabel).From[0].PodSelector = &metav1.LabelSelector{}
		}},
		{"control port open to labelled pods of every namespace", "a pod of another namespace with both client labels can reach the control port", func(m *manifests) {
			rule(m, "fenced-backend", controlClientLabel).From[0].NamespaceSelector = &metav1.LabelSelector{}
		}},
		{"control port open to the whole metrics namespace", "that is not Prometheus can reach the control port", func(m *manifests) {
			rule(m, "fenceproxy-gateway", "app.kubernetes.io/name").From[0].PodSelector = nil
		}},
		{"control port open to an ipBlock", "an unlabelled pod of the namespace can reach the control port", func(m *manifests) {
			r := rule(m, "fenceproxy-gateway", controlClientLabel)
			r.From = append(r.From, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}})
		}},
		{"client rule on every port", "admits every port", func(m *manifests) {
			rule(m, "fenced-backend", clientLabel).Ports = nil
		}},
		{"client rule on the control port", "a fenceproxy.io/client pod can reach the control port 9090", func(m *manifests) {
			control := intstr.FromString("control")
			r := rule(m, "fenceproxy-gateway", clientLabel)
			r.Ports = append(r.Ports, networkingv1.NetworkPolicyPort{Port: &control})
		}},
		{"Prometheus on the proxy port only", "Prometheus in namespace monitoring cannot reach the control port", func(m *manifests) {
			http := intstr.FromString("http")
			rule(m, "fenced-backend", "app.kubernetes.io/name").Ports[0].Port = &http
		}},
		{"backend port admitted", "admits port 9000, which is neither", func(m *manifests) {
			backend := intstr.FromInt32(9000)
			r := rule(m, "fenced-backend", clientLabel)
			r.Ports = append(r.Ports, networkingv1.NetworkPolicyPort{Port: &backend})
		}},
		{"port name that the container lacks", "admits port -1, which is neither", func(m *manifests) {
			s3 := intstr.FromString("s3")
			rule(m, "fenceproxy-gateway", clientLabel).Ports[0].Port = &s3
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := build(t, "k8s")
			tc.breakIt(m)
			problems := m.problems(known)
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("no problem mentioning %q; got %q", tc.want, problems)
			}
		})
	}
}

// TestResignBase checks what the resign base adds to the gateway: resign mode
// over HTTPS, the credentials Secret mounted as a directory, a ServiceAccount
// with an IRSA annotation; and that resignProblems names each way of breaking
// it.
func TestResignBase(t *testing.T) {
	known := knownVariables(t)
	m := build(t, "k8s/gateway-resign")
	if len(m.statefulSets) != 1 || len(m.accounts) != 1 {
		t.Fatalf("%d StatefulSets and %d ServiceAccounts, want 1 and 1", len(m.statefulSets), len(m.accounts))
	}
	pc := proxyOf(m.workloads()[0], known)
	if pc.cfg.S3 != "resign" || pc.credentialsFile == "" || pc.cfg.S3Region == "" || len(pc.cfg.S3Domains) == 0 {
		t.Errorf("the resign base runs S3=%q with credentials file %q, region %q, domains %v", pc.cfg.S3, pc.credentialsFile, pc.cfg.S3Region, pc.cfg.S3Domains)
	}
	if a := m.accounts[0]; !strings.HasPrefix(a.Annotations["eks.amazonaws.com/role-arn"], "arn:aws:iam::") {
		t.Errorf("ServiceAccount %s has no IRSA role annotation example: %v", a.Name, a.Annotations)
	}

	proxy := func(m *manifests) *corev1.Container { return &m.statefulSets[0].Spec.Template.Spec.Containers[0] }
	mount := func(m *manifests) *corev1.VolumeMount {
		for i, vm := range proxy(m).VolumeMounts {
			if vm.Name == "s3-credentials" {
				return &proxy(m).VolumeMounts[i]
			}
		}
		t.Fatal("no s3-credentials mount")
		return nil
	}
	volume := func(m *manifests) *corev1.Volume {
		for i, v := range m.statefulSets[0].Spec.Template.Spec.Volumes {
			if v.Name == "s3-credentials" {
				return &m.statefulSets[0].Spec.Template.Spec.Volumes[i]
			}
		}
		t.Fatal("no s3-credentials volume")
		return nil
	}
	setEnv := func(m *manifests, name, value string) {
		c := proxy(m)
		for i := range c.Env {
			if c.Env[i].Name == name {
				c.Env[i].Value = value
				return
			}
		}
		t.Fatalf("no variable %s", name)
	}
	for _, tc := range []struct {
		name, want string
		breakIt    func(m *manifests)
	}{
		{"plain HTTP to the store", "is not https", func(m *manifests) {
			setEnv(m, "FENCEPROXY_UPSTREAM", "http://s3.us-east-1.amazonaws.com")
		}},
		{"credentials file off the mount", "is not inside a mounted volume", func(m *manifests) {
			setEnv(m, "FENCEPROXY_S3_CREDENTIALS_FILE", "/etc/credentials.yaml")
		}},
		{"credentials file is the mount point", "is not inside a mounted volume", func(m *manifests) {
			setEnv(m, "FENCEPROXY_S3_CREDENTIALS_FILE", "/etc/fenceproxy/s3")
		}},
		{"credentials on an emptyDir", "is not a Secret", func(m *manifests) {
			volume(m).VolumeSource = corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
		}},
		{"subPath mount", "never sees the Secret's updates", func(m *manifests) {
			vm := mount(m)
			vm.MountPath, vm.SubPath = "/etc/fenceproxy/s3/credentials.yaml", "credentials.yaml"
		}},
		{"writable mount", "must be mounted readOnly", func(m *manifests) {
			mount(m).ReadOnly = false
		}},
		{"optional Secret", "must not be optional", func(m *manifests) {
			yes := true
			volume(m).Secret.Optional = &yes
		}},
		{"no ServiceAccount", "must name a ServiceAccount of this build", func(m *manifests) {
			m.statefulSets[0].Spec.Template.Spec.ServiceAccountName = ""
		}},
		{"unknown ServiceAccount", "must name a ServiceAccount of this build", func(m *manifests) {
			m.accounts = nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := build(t, "k8s/gateway-resign")
			tc.breakIt(m)
			problems := m.problems(known)
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("no problem mentioning %q; got %q", tc.want, problems)
			}
		})
	}
}

// TestClusterBase checks the cluster base (FENCEPROXY_STORE=etcd): three
// replicas, a PodDisruptionBudget, no volume, each replica's id from its pod's
// name and its peer address from its pod's IP, the peer port on no Service and
// reachable from the replicas only, the etcd endpoints and the secrets from a
// Secret, readiness on /readyz; and that the checks name each way of breaking
// it.
func TestClusterBase(t *testing.T) {
	known := knownVariables(t)
	m := build(t, "k8s/cluster")
	if len(m.deployments) != 1 || len(m.budgets) != 1 || len(m.pvcs) != 0 {
		t.Fatalf("%d Deployments, %d PodDisruptionBudgets and %d claims, want 1, 1 and 0", len(m.deployments), len(m.budgets), len(m.pvcs))
	}
	pc := proxyOf(m.workloads()[0], known)
	if !pc.cluster || pc.peerPort <= 0 || pc.peerPort == pc.listenPort || pc.peerPort == pc.ctrlPort {
		t.Errorf("the cluster base runs FENCEPROXY_STORE=%q with peer port %d", pc.environ[config.Prefix+"STORE"], pc.peerPort)
	}
	if got, want := pc.environ[config.Prefix+"PEER_ADVERTISE"], fieldStandIns["status.podIP"]+":"+strconv.Itoa(int(pc.peerPort)); got != want {
		t.Errorf("FENCEPROXY_PEER_ADVERTISE expands to %q, want %q", got, want)
	}

	deployment := func(m *manifests) *appsv1.Deployment { return m.deployments[0] }
	proxy := func(m *manifests) *corev1.Container { return &deployment(m).Spec.Template.Spec.Containers[0] }
	env := func(m *manifests, name string) *corev1.EnvVar {
		c := proxy(m)
		for i := range c.Env {
			if c.Env[i].Name == name {
				return &c.Env[i]
			}
		}
		t.Fatalf("no variable %s", name)
		return nil
	}
	literal := func(m *manifests, name, value string) {
		e := env(m, name)
		e.Value, e.ValueFrom = value, nil
	}
	peerRule := func(m *manifests) *networkingv1.NetworkPolicyIngressRule {
		np := m.policies[0]
		for i, r := range np.Spec.Ingress {
			if len(r.Ports) > 0 && r.Ports[0].Port != nil && r.Ports[0].Port.String() == "peer" {
				return &np.Spec.Ingress[i]
			}
		}
		t.Fatal("no ingress rule for the peer port")
		return nil
	}
	for _, tc := range []struct {
		name, want string
		breakIt    func(m *manifests)
	}{
		{"one replica", "replicas must be set to at least 3", func(m *manifests) {
			one := int32(1)
			deployment(m).Spec.Replicas = &one
		}},
		{"no PodDisruptionBudget", "0 PodDisruptionBudgets select its pods", func(m *manifests) {
			m.budgets = nil
		}},
		{"budget that blocks every eviction", "must be maxUnavailable: 1 or minAvailable: 2", func(m *manifests) {
			three := intstr.FromInt32(3)
			m.budgets[0].Spec.MaxUnavailable, m.budgets[0].Spec.MinAvailable = nil, &three
		}},
		{"budget that lets two go", "must be maxUnavailable: 1", func(m *manifests) {
			two := intstr.FromInt32(2)
			m.budgets[0].Spec.MaxUnavailable = &two
		}},
		{"a data volume", "a cluster pod keeps no state", func(m *manifests) {
			spec := &deployment(m).Spec.Template.Spec
			spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		}},
		{"DATA_DIR set", "FENCEPROXY_DATA_DIR is set", func(m *manifests) {
			c := proxy(m)
			c.Env = append(c.Env, corev1.EnvVar{Name: "FENCEPROXY_DATA_DIR", Value: "/var/lib/fenceproxy"})
		}},
		{"one id for every replica", "FENCEPROXY_REPLICA_ID must come from the pod's metadata.name", func(m *manifests) {
			literal(m, "FENCEPROXY_REPLICA_ID", "fenceproxy")
		}},
		{"id from the node", "FENCEPROXY_REPLICA_ID must come from the pod's metadata.name", func(m *manifests) {
			env(m, "FENCEPROXY_REPLICA_ID").ValueFrom.FieldRef.FieldPath = "spec.nodeName"
		}},
		{"one address for every replica", "must be $(V):<peer port>", func(m *manifests) {
			literal(m, "FENCEPROXY_PEER_ADVERTISE", "fenceproxy-cluster:8081")
		}},
		{"address from the host", "must be $(V):<peer port>", func(m *manifests) {
			env(m, "POD_IP").ValueFrom.FieldRef.FieldPath = "status.hostIP"
		}},
		{"address on the proxy port", "does not name the peer listener's port 8081", func(m *manifests) {
			literal(m, "FENCEPROXY_PEER_ADVERTISE", "$(POD_IP):8080")
		}},
		{"peer listener moved", "does not name the peer listener's port 8181", func(m *manifests) {
			literal(m, "FENCEPROXY_PEER_LISTEN", ":8181")
		}},
		{"peer port on the client Service", "targets the peer listener 8081", func(m *manifests) {
			s := m.service("fenceproxy-cluster")
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "peer", Port: 8081, TargetPort: intstr.FromString("peer")})
		}},
		{"peer port undeclared", "declares no named port 8081", func(m *manifests) {
			c := proxy(m)
			c.Ports = slices.DeleteFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "peer" })
		}},
		{"literal peer secret", "FENCEPROXY_PEER_SECRET must come from a Secret", func(m *manifests) {
			literal(m, "FENCEPROXY_PEER_SECRET", "0123456789abcdef0123")
		}},
		{"literal etcd password", "FENCEPROXY_ETCD_PASSWORD must come from a Secret", func(m *manifests) {
			literal(m, "FENCEPROXY_ETCD_PASSWORD", "hunter2hunter2")
		}},
		{"optional peer secret", "FENCEPROXY_PEER_SECRET must not be optional", func(m *manifests) {
			yes := true
			env(m, "FENCEPROXY_PEER_SECRET").ValueFrom.SecretKeyRef.Optional = &yes
		}},
		{"literal endpoints", "FENCEPROXY_ETCD_ENDPOINTS must come from a Secret", func(m *manifests) {
			literal(m, "FENCEPROXY_ETCD_ENDPOINTS", "http://etcd:2379")
		}},
		{"peer port open to clients", "a fenceproxy.io/client pod can reach the peer port 8081", func(m *manifests) {
			peerRule(m).From[0].PodSelector.MatchLabels = map[string]string{clientLabel: "true"}
		}},
		{"peer port open to the namespace", "an unlabelled pod of the namespace can reach the peer port 8081", func(m *manifests) {
			peerRule(m).From = nil
		}},
		{"peer port closed to the replicas", "a replica of Deployment/fenceproxy-cluster cannot reach the peer port 8081", func(m *manifests) {
			np := m.policies[0]
			np.Spec.Ingress = slices.DeleteFunc(np.Spec.Ingress, func(r networkingv1.NetworkPolicyIngressRule) bool {
				return r.Ports[0].Port.String() == "peer"
			})
		}},
		{"readiness on /healthz", `readinessProbe path "/healthz"`, func(m *manifests) {
			proxy(m).ReadinessProbe.HTTPGet.Path = "/healthz"
		}},
		{"grace period without the handover", "+ the handover's FENCEPROXY_DRAIN_TIMEOUT", func(m *manifests) {
			g := int64(45)
			deployment(m).Spec.Template.Spec.TerminationGracePeriodSeconds = &g
		}},
		{"no anti-affinity", "no pod anti-affinity", func(m *manifests) {
			deployment(m).Spec.Template.Spec.Affinity = nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := build(t, "k8s/cluster")
			tc.breakIt(m)
			problems := m.problems(known)
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("no problem mentioning %q; got %q", tc.want, problems)
			}
		})
	}
}
