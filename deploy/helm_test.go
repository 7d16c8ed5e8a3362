package deploy

import (
	"encoding/json"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/engine"

	"github.com/fenceproxy/fenceproxy/config"
)

// chartDir is fenceproxy's Helm chart, relative to this package.
const chartDir = "helm/fenceproxy"

// Where the test installs the chart.
const (
	releaseName      = "fenceproxy"
	releaseNamespace = "storage"
)

// documentSeparator splits a rendered template into its YAML documents.
var documentSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// render renders the chart in-process as `helm install --dry-run=client`
// would, with Helm's own values coalescing and schema validation, under the
// release name (fullname: the objects' name), and decodes every object
// (manifests.add). values is YAML over the chart's values.yaml. An error is
// the chart refusing the values (a fail, a required, the schema) or an
// object that does not decode; notes is the rendered NOTES.txt.
func render(t *testing.T, release, values string) (m *manifests, notes string, err error) {
	t.Helper()
	return renderSchema(t, release, values, true)
}

// renderSchema is render with the schema's validation on or off (as
// `helm install --skip-schema-validation`), to test the templates' own
// refusals.
func renderSchema(t *testing.T, release, values string, schema bool) (m *manifests, notes string, err error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	vals, err := common.ReadValues([]byte(values))
	if err != nil {
		t.Fatalf("the test's values: %v", err)
	}
	caps := common.DefaultCapabilities.Copy()
	kv, err := common.ParseKubeVersion("v1.33.0")
	if err != nil {
		t.Fatal(err)
	}
	caps.KubeVersion = *kv
	opts := common.ReleaseOptions{Name: release, Namespace: releaseNamespace, Revision: 1, IsInstall: true}
	rv, err := util.ToRenderValuesWithSchemaValidation(ch, vals, opts, caps, !schema)
	if err != nil {
		return nil, "", err
	}
	out, err := engine.Render(ch, rv)
	if err != nil {
		return nil, "", err
	}
	m = &manifests{}
	for _, name := range slices.Sorted(maps.Keys(out)) {
		if strings.HasSuffix(name, "NOTES.txt") {
			notes = out[name]
			continue
		}
		for _, doc := range documentSeparator.Split(out[name], -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			if err := m.add([]byte(doc)); err != nil {
				return nil, "", err
			}
		}
	}
	return m, notes, nil
}

// stripComments drops the YAML comment lines of a document.
func stripComments(doc string) string {
	var b strings.Builder
	for line := range strings.Lines(doc) {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// mustRender renders values that the chart must take.
func mustRender(t *testing.T, values string) (*manifests, string) {
	t.Helper()
	m, notes, err := render(t, releaseName, values)
	if err != nil {
		t.Fatalf("rendering the chart: %v", err)
	}
	return m, notes
}

// The values of the test's releases: what an operator would pass with -f.
const (
	gatewayValues = `
upstream: http://minio.storage-system.svc:9000
`
	resignValues = `
upstream: https://s3.us-east-1.amazonaws.com
s3:
  mode: resign
  region: us-east-1
  storeStyle: virtual
  credentialsSecret: fenceproxy-s3-credentials
  storeCredentialsSecret: fenceproxy-store-credentials
serviceAccount:
  annotations:
    eks.amazonaws.com/role-arn: arn:aws:iam::111122223333:role/fenceproxy-gateway
`
	clusterValues = `
mode: cluster
replicas: 3
upstream: https://objectstore.example.com
etcd:
  endpoints:
    - https://etcd-0.etcd:2379
    - https://etcd-1.etcd:2379
    - https://etcd-2.etcd:2379
  tls:
    secretName: etcd-client-tls
    clientCert: true
`
)

func TestHelmChartRendersAndPasses(t *testing.T) {
	known := knownVariables(t)
	for _, tc := range []struct {
		name, values string
		// The objects of the release.
		deployments, statefulSets, services, policies, budgets, accounts, monitors int
		// Problems the release must have (substrings); any other fails.
		wantProblems []string
	}{
		{name: "gateway", values: gatewayValues,
			statefulSets: 1, services: 2, policies: 1, accounts: 1},
		{name: "gateway resign", values: resignValues,
			statefulSets: 1, services: 2, policies: 1, accounts: 1},
		{name: "cluster with etcd TLS", values: clusterValues,
			deployments: 1, services: 2, policies: 1, budgets: 1, accounts: 1},
		{name: "cluster of 5 on plain etcd with a ServiceMonitor", values: `
mode: cluster
replicas: 5
upstream: http://backend.storage.svc:9000
etcd: {endpoints: [http://etcd:2379]}
serviceMonitor: {enabled: true, labels: {release: prometheus}}
extraEnv:
  - {name: FENCEPROXY_RESOURCE_DEPTH, value: "2"}
  - {name: GOMAXPROCS, value: "1"}
`, deployments: 1, services: 2, policies: 1, budgets: 1, accounts: 1, monitors: 1},
		{name: "gateway with TLS on both listeners and a ServiceMonitor", values: gatewayValues + `
tls: {proxySecret: fenceproxy-tls, controlSecret: fenceproxy-control-tls}
serviceMonitor: {enabled: true, tlsConfig: {insecureSkipVerify: true}}
`, statefulSets: 1, services: 2, policies: 1, accounts: 1, monitors: 1},
		{name: "gateway with the lease API open", values: gatewayValues + `
tokens: {leaseOpen: true}
`, statefulSets: 1, services: 2, policies: 1, accounts: 1},
		{name: "gateway without a NetworkPolicy", values: gatewayValues + `
networkPolicy: {enabled: false}
`, statefulSets: 1, services: 2, accounts: 1,
			wantProblems: []string{"StatefulSet/fenceproxy: no NetworkPolicy isolates its pods"}},
		{name: "cluster without a NetworkPolicy", values: clusterValues + `
networkPolicy: {enabled: false}
`, deployments: 1, services: 2, budgets: 1, accounts: 1,
			wantProblems: []string{"Deployment/fenceproxy: no NetworkPolicy isolates its pods"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, notes := mustRender(t, tc.values)
			got := []int{len(m.deployments), len(m.statefulSets), len(m.services), len(m.policies), len(m.budgets), len(m.accounts), len(m.serviceMonitors)}
			want := []int{tc.deployments, tc.statefulSets, tc.services, tc.policies, tc.budgets, tc.accounts, tc.monitors}
			if !slices.Equal(got, want) {
				t.Fatalf("Deployments, StatefulSets, Services, NetworkPolicies, PodDisruptionBudgets, ServiceAccounts, ServiceMonitors: %v, want %v", got, want)
			}
			problems := m.problems(known)
			for _, w := range tc.wantProblems {
				if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, w) }) {
					t.Errorf("no problem mentioning %q", w)
				}
			}
			for _, p := range problems {
				if !slices.ContainsFunc(tc.wantProblems, func(w string) bool { return strings.Contains(p, w) }) {
					t.Error(p)
				}
			}
			if !strings.Contains(notes, "fenceproxy.storage.svc:8080") {
				t.Errorf("NOTES.txt does not name the proxy Service:\n%s", notes)
			}
		})
	}
}

// TestHelmChartSettings checks what each value set is for: resign mode with
// its keys and IRSA annotation, cluster mode on etcd over TLS with its
// files, TLS on the listeners (and the probes over HTTPS), extra variables.
func TestHelmChartSettings(t *testing.T) {
	known := knownVariables(t)
	proxy := func(t *testing.T, m *manifests) proxyConfig {
		t.Helper()
		ws := m.workloads()
		if len(ws) != 1 {
			t.Fatalf("%d workloads, want 1", len(ws))
		}
		pc := proxyOf(ws[0], known)
		if pc.c == nil || len(pc.configurationProblems) > 0 {
			t.Fatalf("proxy container: %s %v", pc.containerLookupProblem, pc.configurationProblems)
		}
		return pc
	}

	t.Run("resign", func(t *testing.T) {
		m, _ := mustRender(t, resignValues)
		pc := proxy(t, m)
		if pc.cfg.S3 != "resign" || pc.credentialsFile != "/etc/fenceproxy/s3/credentials.yaml" || pc.cfg.S3StoreStyle != "virtual" ||
			!slices.Equal(pc.cfg.S3Domains, []string{"fenceproxy"}) || !pc.cfg.S3TokenMetadata {
			t.Errorf("S3=%q, credentials file %q, store style %q, domains %v, token metadata %v", pc.cfg.S3, pc.credentialsFile, pc.cfg.S3StoreStyle, pc.cfg.S3Domains, pc.cfg.S3TokenMetadata)
		}
		if a := m.accounts[0]; !strings.HasPrefix(a.Annotations["eks.amazonaws.com/role-arn"], "arn:aws:iam::") {
			t.Errorf("ServiceAccount %s lacks the IRSA annotation: %v", a.Name, a.Annotations)
		}
		if spec := m.statefulSets[0].Spec.Template.Spec; spec.AutomountServiceAccountToken == nil || !*spec.AutomountServiceAccountToken {
			t.Error("resign mode: automountServiceAccountToken is not true (the EKS webhooks)")
		}
	})

	t.Run("cluster with etcd TLS", func(t *testing.T) {
		m, _ := mustRender(t, clusterValues)
		pc := proxy(t, m)
		want := map[string]string{
			config.Prefix + "ETCD_CA_FILE":   "/etc/fenceproxy/etcd/ca.crt",
			config.Prefix + "ETCD_CERT_FILE": "/etc/fenceproxy/etcd/tls.crt",
			config.Prefix + "ETCD_KEY_FILE":  "/etc/fenceproxy/etcd/tls.key",
		}
		if !maps.Equal(pc.files, want) {
			t.Errorf("files from Secrets %v, want %v", pc.files, want)
		}
		if len(m.secrets) != 1 || m.secrets[0].StringData["etcd-endpoints"] != "https://etcd-0.etcd:2379,https://etcd-1.etcd:2379,https://etcd-2.etcd:2379" {
			t.Errorf("the endpoints' Secret: %+v", m.secrets)
		}
		if d := m.deployments[0]; *d.Spec.Replicas != 3 || d.Spec.Template.Annotations["checksum/etcd"] == "" {
			t.Errorf("replicas %d, checksum/etcd %q", *d.Spec.Replicas, d.Spec.Template.Annotations["checksum/etcd"])
		}
	})

	t.Run("TLS on the listeners", func(t *testing.T) {
		m, notes := mustRender(t, gatewayValues+"tls: {proxySecret: a, controlSecret: b}\n")
		pc := proxy(t, m)
		if pc.cfg.TLSCertFile == "" || pc.cfg.ControlTLSCertFile == "" {
			t.Errorf("TLS files: proxy %q, control %q", pc.cfg.TLSCertFile, pc.cfg.ControlTLSCertFile)
		}
		if pc.c.ReadinessProbe.HTTPGet.Scheme != corev1.URISchemeHTTPS || pc.c.LivenessProbe.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Error("the probes do not use HTTPS with TLS on the control listener")
		}
		if !strings.Contains(notes, "https://fenceproxy.storage.svc:8080") || !strings.Contains(notes, "https://fenceproxy-control.storage.svc:9090") {
			t.Errorf("NOTES.txt does not give the https endpoints:\n%s", notes)
		}
	})

	t.Run("extra variables and another release name", func(t *testing.T) {
		m, _, err := render(t, "fp", gatewayValues+"extraEnv: [{name: FENCEPROXY_LOG_LEVEL, value: debug}]\n")
		if err != nil {
			t.Fatal(err)
		}
		pc := proxy(t, m)
		if pc.cfg.LogLevel.String() != "DEBUG" {
			t.Errorf("FENCEPROXY_LOG_LEVEL from extraEnv: %s", pc.cfg.LogLevel)
		}
		if s := m.statefulSets[0]; s.Name != "fp-fenceproxy" || s.Spec.ServiceName != "fp-fenceproxy-control" {
			t.Errorf("StatefulSet %s, serviceName %s", s.Name, s.Spec.ServiceName)
		}
		for _, p := range m.problems(known) {
			t.Error(p)
		}
	})
}

// TestHelmChartMatchesKustomize renders the chart for each kustomize base's
// shape and compares what both must agree on: the pod's and the container's
// security context, probes, ports, preStop, resources, grace period, volume
// mounts and variables (names, and the literal values but those naming
// the backend and the release).
func TestHelmChartMatchesKustomize(t *testing.T) {
	for _, tc := range []struct{ base, values string }{
		{"k8s/gateway", `upstream: https://objectstore.example.com`},
		{"k8s/gateway-resign", resignValues},
		{"k8s/cluster", `
mode: cluster
upstream: https://objectstore.example.com
etcd: {endpoints: [http://etcd:2379]}
`},
	} {
		t.Run(tc.base, func(t *testing.T) {
			k := build(t, tc.base).workloads()
			m, _ := mustRender(t, tc.values)
			h := m.workloads()
			if len(k) != 1 || len(h) != 1 {
				t.Fatalf("%d and %d workloads", len(k), len(h))
			}
			kt, ht := k[0].tmpl, h[0].tmpl
			if !strings.HasPrefix(k[0].id, strings.Split(h[0].id, "/")[0]+"/") {
				t.Errorf("kustomize has %s, the chart %s", k[0].id, h[0].id)
			}
			if *k[0].replicas != *h[0].replicas {
				t.Errorf("replicas: kustomize %d, chart %d", *k[0].replicas, *h[0].replicas)
			}
			same := func(what string, a, b any) {
				t.Helper()
				if !reflect.DeepEqual(a, b) {
					ja, _ := json.Marshal(a)
					jb, _ := json.Marshal(b)
					t.Errorf("%s:\n kustomize %s\n chart     %s", what, ja, jb)
				}
			}
			same("pod securityContext", kt.Spec.SecurityContext, ht.Spec.SecurityContext)
			same("terminationGracePeriodSeconds", kt.Spec.TerminationGracePeriodSeconds, ht.Spec.TerminationGracePeriodSeconds)
			same("automountServiceAccountToken", kt.Spec.AutomountServiceAccountToken, ht.Spec.AutomountServiceAccountToken)
			same("enableServiceLinks", kt.Spec.EnableServiceLinks, ht.Spec.EnableServiceLinks)
			same("affinity", kt.Spec.Affinity != nil, ht.Spec.Affinity != nil)
			kc, hc := &kt.Spec.Containers[0], &ht.Spec.Containers[0]
			same("containers", len(kt.Spec.Containers)+len(kt.Spec.InitContainers), len(ht.Spec.Containers)+len(ht.Spec.InitContainers))
			same("container name", kc.Name, hc.Name)
			same("securityContext", kc.SecurityContext, hc.SecurityContext)
			same("ports", kc.Ports, hc.Ports)
			same("livenessProbe", plainScheme(kc.LivenessProbe), plainScheme(hc.LivenessProbe))
			same("readinessProbe", plainScheme(kc.ReadinessProbe), plainScheme(hc.ReadinessProbe))
			same("lifecycle", kc.Lifecycle, hc.Lifecycle)
			same("resources", kc.Resources, hc.Resources)
			byName := func(a, b corev1.VolumeMount) int { return strings.Compare(a.Name, b.Name) }
			same("volumeMounts", slices.SortedFunc(slices.Values(kc.VolumeMounts), byName), slices.SortedFunc(slices.Values(hc.VolumeMounts), byName))
			same("volumes", secretVolumes(kt.Spec.Volumes), secretVolumes(ht.Spec.Volumes))
			same("variables", envSummary(kc.Env), envSummary(hc.Env))
		})
	}
}

// plainScheme is a copy of an HTTP probe with the scheme HTTP made explicit.
func plainScheme(p *corev1.Probe) *corev1.Probe {
	if p == nil || p.HTTPGet == nil {
		return p
	}
	q := p.DeepCopy()
	q.HTTPGet.Scheme = schemeOf(q.HTTPGet.Scheme)
	return q
}

// secretVolumes lists the Secret volumes as name, and default mode.
func secretVolumes(vs []corev1.Volume) map[string]int32 {
	out := map[string]int32{}
	for _, v := range vs {
		if v.Secret != nil && v.Secret.DefaultMode != nil {
			out[v.Name] = *v.Secret.DefaultMode
		}
	}
	return out
}

// envSummary lists a container's variables as they must agree between the
// chart and a kustomize base: a literal's value (but the backend's, the
// release's S3 domain), a field's path, a Secret's key.
func envSummary(env []corev1.EnvVar) map[string]string {
	out := map[string]string{}
	for _, e := range env {
		switch {
		case e.Name == config.Prefix+"UPSTREAM" || e.Name == config.Prefix+"S3_DOMAINS":
			out[e.Name] = "(instance)"
		case e.ValueFrom == nil:
			out[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			out[e.Name] = "field " + e.ValueFrom.FieldRef.FieldPath
		case e.ValueFrom.SecretKeyRef != nil:
			out[e.Name] = "secret key " + e.ValueFrom.SecretKeyRef.Key
		}
	}
	return out
}

// TestHelmChartRefusesBadValues: values that cannot make a working release
// fail at install with a message that says what is wrong.
func TestHelmChartRefusesBadValues(t *testing.T) {
	for _, tc := range []struct{ name, values, want string }{
		{"unknown mode", gatewayValues + "mode: bogus\n", "at '/mode': value must be one of 'gateway', 'cluster'"},
		{"sidecar mode", gatewayValues + "mode: sidecar\n", "at '/mode'"},
		{"no upstream", "mode: gateway\n", "upstream is required"},
		{"upstream not a URL", "upstream: objectstore.example.com\n", "upstream"},
		{"cluster without etcd endpoints", "mode: cluster\nupstream: http://backend:9000\n", "etcd.endpoints is required in cluster mode"},
		{"etcd endpoint not a URL", "mode: cluster\nupstream: http://backend:9000\netcd: {endpoints: [etcd:2379]}\n", "etcd"},
		{"etcd TLS on http endpoints", "mode: cluster\nupstream: http://backend:9000\netcd: {endpoints: [http://etcd:2379], tls: {secretName: etcd-tls}}\n", "is not https://, but etcd.tls.secretName is set"},
		{"etcd client certificate without a Secret", "mode: cluster\nupstream: http://backend:9000\netcd: {endpoints: [http://etcd:2379], tls: {clientCert: true}}\n", "etcd.tls.clientCert needs etcd.tls.secretName"},
		{"cluster of one", clusterValues + "replicas: 1\n", "cluster mode needs at least 3 replicas"},
		{"cluster of two", clusterValues + "replicas: 2\n", "cluster mode needs at least 3 replicas"},
		{"gateway of two", gatewayValues + "replicas: 2\n", "gateway mode runs exactly 1 replica"},
		{"cluster without its Secret", clusterValues + "cluster: {secretName: ''}\n", "cluster.secretName is required"},
		{"no lease token", gatewayValues + "tokens: {secretName: ''}\n", "tokens.secretName is required"},
		{"resign without worker keys", "upstream: https://s3.us-east-1.amazonaws.com\ns3: {mode: resign}\n", "s3.credentialsSecret is required"},
		{"resign over plain HTTP", "upstream: http://minio:9000\ns3: {mode: resign, credentialsSecret: keys}\n", "must be https:// with s3.mode resign"},
		{"unknown S3 mode", gatewayValues + "s3: {mode: proxy}\n", "/s3/mode"},
		{"misspelt value", gatewayValues + "replica: 1\n", "replica"},
		{"misspelt variable", gatewayValues + "extraEnv: [{name: FENCEPROXY_SHUTDOWN_TIMOUT, value: 30s}]\n", "extraEnv"},
		{"NetworkPolicy without Prometheus's labels", gatewayValues + "networkPolicy: {prometheus: {podLabels: null}}\n", "podLabels"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := render(t, releaseName, tc.values)
			if err == nil {
				t.Fatalf("the chart took %q", tc.values)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("the error does not mention %q: %v", tc.want, err)
			}
			t.Logf("%v", err)
		})
	}
	// The templates refuse what the schema refuses first, for
	// --skip-schema-validation.
	for _, tc := range []struct{ name, values, want string }{
		{"unknown mode", gatewayValues + "mode: bogus\n", `mode: "bogus" must be gateway or cluster`},
		{"sidecar mode", gatewayValues + "mode: sidecar\n", "the sidecar is a kustomize component"},
		{"etcd endpoint not a URL", "mode: cluster\nupstream: http://backend:9000\netcd: {endpoints: [etcd:2379]}\n", `etcd.endpoints: "etcd:2379" is not an http:// or https:// URL`},
	} {
		t.Run(tc.name+" without the schema", func(t *testing.T) {
			_, _, err := renderSchema(t, releaseName, tc.values, false)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

// TestHelmSchemaKnowsEveryVariable: the FENCEPROXY_* names values.schema.json
// admits in extraEnv are exactly config.Config's variables.
func TestHelmSchemaKnowsEveryVariable(t *testing.T) {
	known := knownVariables(t)
	b, err := os.ReadFile(chartDir + "/values.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			ExtraEnv struct {
				Items struct {
					Properties struct {
						Name struct {
							AnyOf []struct {
								Enum []string `json:"enum"`
							} `json:"anyOf"`
						} `json:"name"`
					} `json:"properties"`
				} `json:"items"`
			} `json:"extraEnv"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range schema.Properties.ExtraEnv.Items.Properties.Name.AnyOf {
		names = append(names, a.Enum...)
	}
	slices.Sort(names)
	want := slices.Sorted(maps.Keys(known))
	if !slices.Equal(names, want) {
		t.Errorf("values.schema.json's extraEnv names differ from config.Config's variables:\n schema %v\n config %v", names, want)
	}
}

// TestHelmChartLint runs `helm lint --strict` in-process on each mode.
func TestHelmChartLint(t *testing.T) {
	for name, values := range map[string]string{"gateway": gatewayValues, "resign": resignValues, "cluster": clusterValues} {
		t.Run(name, func(t *testing.T) {
			vals, err := common.ReadValues([]byte(values))
			if err != nil {
				t.Fatal(err)
			}
			linter := lint.RunAll(chartDir, vals, releaseNamespace)
			for _, msg := range linter.Messages {
				if msg.Severity >= support.WarningSev {
					t.Error(msg)
				} else {
					t.Log(msg)
				}
			}
		})
	}
}

// The chart's version and appVersion follow the project's: semantic
// versions, the app's with a leading v (v1.2.3, as git tags).
func TestHelmChartMetadata(t *testing.T) {
	ch, err := loader.LoadDir(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := ch.(*chartv2.Chart)
	if !ok {
		t.Fatalf("chart of type %T", ch)
	}
	md := c.Metadata
	if md.APIVersion != chartv2.APIVersionV2 || !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(md.Version) ||
		!regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(md.AppVersion) || len(md.Dependencies) > 0 {
		t.Errorf("Chart.yaml: apiVersion %s, version %s, appVersion %s, %d dependencies", md.APIVersion, md.Version, md.AppVersion, len(md.Dependencies))
	}
}

// TestHelmChecksCatchMistakes breaks rendered releases one way at a time in
// what the chart adds to the kustomize bases (files from Secrets, TLS, the
// ServiceMonitor, the chart's own Secret), and expects the checks to name
// the mistake.
func TestHelmChecksCatchMistakes(t *testing.T) {
	known := knownVariables(t)
	tlsValues := gatewayValues + "tls: {proxySecret: a, controlSecret: b}\nserviceMonitor: {enabled: true}\n"
	pod := func(m *manifests) *corev1.PodSpec {
		if len(m.statefulSets) > 0 {
			return &m.statefulSets[0].Spec.Template.Spec
		}
		return &m.deployments[0].Spec.Template.Spec
	}
	volume := func(m *manifests, name string) *corev1.Volume {
		i := slices.IndexFunc(pod(m).Volumes, func(v corev1.Volume) bool { return v.Name == name })
		if i < 0 {
			t.Fatalf("no volume %s", name)
		}
		return &pod(m).Volumes[i]
	}
	mount := func(m *manifests, name string) *corev1.VolumeMount {
		c := &pod(m).Containers[0]
		i := slices.IndexFunc(c.VolumeMounts, func(v corev1.VolumeMount) bool { return v.Name == name })
		if i < 0 {
			t.Fatalf("no mount %s", name)
		}
		return &c.VolumeMounts[i]
	}
	for _, tc := range []struct {
		name, values, want string
		breakIt            func(m *manifests)
	}{
		{"probes over HTTP to a TLS control listener", tlsValues, "readinessProbe scheme HTTP: the control listener speaks HTTPS", func(m *manifests) {
			pod(m).Containers[0].ReadinessProbe.HTTPGet.Scheme = corev1.URISchemeHTTP
		}},
		{"probes over HTTPS to a plain control listener", gatewayValues, "livenessProbe scheme HTTPS: the control listener speaks HTTP", func(m *manifests) {
			pod(m).Containers[0].LivenessProbe.HTTPGet.Scheme = corev1.URISchemeHTTPS
		}},
		{"certificate on a writable mount", tlsValues, "FENCEPROXY_CONTROL_TLS_CERT_FILE's volume control-tls must be mounted readOnly", func(m *manifests) {
			mount(m, "control-tls").ReadOnly = false
		}},
		{"certificate from an optional Secret", tlsValues, "the Secret a of FENCEPROXY_TLS_CERT_FILE must not be optional", func(m *manifests) {
			yes := true
			volume(m, "tls").Secret.Optional = &yes
		}},
		{"etcd CA off the mount", clusterValues, "FENCEPROXY_ETCD_CA_FILE /etc/ca.crt is not inside a mounted volume", func(m *manifests) {
			c := &pod(m).Containers[0]
			c.Env[slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "FENCEPROXY_ETCD_CA_FILE" })].Value = "/etc/ca.crt"
		}},
		{"ServiceMonitor over HTTP to a TLS control listener", tlsValues, `scheme "http", but the control listener speaks https`, func(m *manifests) {
			m.serviceMonitors[0].Object["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)["scheme"] = "http"
		}},
		{"ServiceMonitor on the proxy Service", gatewayValues + "serviceMonitor: {enabled: true}\n", "whose port http is not the control listener", func(m *manifests) {
			sel := m.serviceMonitors[0].Object["spec"].(map[string]any)["selector"].(map[string]any)["matchLabels"].(map[string]any)
			delete(sel, "fenceproxy.io/listener")
		}},
		{"ServiceMonitor on another path", gatewayValues + "serviceMonitor: {enabled: true}\n", `path "/", want /metrics`, func(m *manifests) {
			m.serviceMonitors[0].Object["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)["path"] = "/"
		}},
		{"ServiceMonitor selecting nothing", gatewayValues + "serviceMonitor: {enabled: true}\n", "selects no Service of this build", func(m *manifests) {
			sel := m.serviceMonitors[0].Object["spec"].(map[string]any)["selector"].(map[string]any)["matchLabels"].(map[string]any)
			sel["app.kubernetes.io/instance"] = "other"
		}},
		{"endpoints' key missing", clusterValues, "names key etcd-endpoints of Secret/fenceproxy-etcd, which has no such key", func(m *manifests) {
			m.secrets[0].StringData = map[string]string{"endpoints": "https://etcd:2379"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := mustRender(t, tc.values)
			if p := m.problems(known); len(p) > 0 {
				t.Fatalf("problems before breaking it: %q", p)
			}
			tc.breakIt(m)
			problems := m.problems(known)
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("no problem mentioning %q; got %q", tc.want, problems)
			}
		})
	}
}
