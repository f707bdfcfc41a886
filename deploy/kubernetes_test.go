// Package deploy holds the files that run the gateway elsewhere
// (Kubernetes, Grafana, Prometheus) and the tests that keep them true to
// the gateway: every object decodes strictly into its Kubernetes type,
// the ConfigMap's gateway.yaml passes the gateway's own validation, and
// every metric a dashboard or an alert names is one the gateway exports.
package deploy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/ratelimit-gateway/gateway/policies"
)

// objects are deploy/kubernetes's objects by kind and name.
type objects struct {
	deployments  map[string]*appsv1.Deployment
	statefulSets map[string]*appsv1.StatefulSet
	services     map[string]*corev1.Service
	configMaps   map[string]*corev1.ConfigMap
	secrets      map[string]*corev1.Secret
	pdbs         map[string]*policyv1.PodDisruptionBudget
}

var docSeparator = regexp.MustCompile(`(?m)^---\s*$`)

// loadKubernetes decodes every document of every file strictly (an
// unknown or misplaced field is an error, as the API server's strict
// validation would say), into the k8s.io/api type its kind names.
func loadKubernetes(t *testing.T) objects {
	t.Helper()
	o := objects{map[string]*appsv1.Deployment{}, map[string]*appsv1.StatefulSet{}, map[string]*corev1.Service{},
		map[string]*corev1.ConfigMap{}, map[string]*corev1.Secret{}, map[string]*policyv1.PodDisruptionBudget{}}
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no kubernetes/*.yaml (%v)", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range docSeparator.Split(string(data), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s[%d]: %v", f, i, err)
			}
			var obj interface{ GetName() string }
			switch tm.APIVersion + " " + tm.Kind {
			case "apps/v1 Deployment":
				d := &appsv1.Deployment{}
				obj, o.deployments[name(t, f, doc, d)] = d, d
			case "apps/v1 StatefulSet":
				s := &appsv1.StatefulSet{}
				obj, o.statefulSets[name(t, f, doc, s)] = s, s
			case "v1 Service":
				s := &corev1.Service{}
				obj, o.services[name(t, f, doc, s)] = s, s
			case "v1 ConfigMap":
				c := &corev1.ConfigMap{}
				obj, o.configMaps[name(t, f, doc, c)] = c, c
			case "v1 Secret":
				s := &corev1.Secret{}
				obj, o.secrets[name(t, f, doc, s)] = s, s
			case "policy/v1 PodDisruptionBudget":
				p := &policyv1.PodDisruptionBudget{}
				obj, o.pdbs[name(t, f, doc, p)] = p, p
			default:
				t.Fatalf("%s[%d]: unexpected kind %q %q", f, i, tm.APIVersion, tm.Kind)
			}
			if obj.GetName() == "" {
				t.Errorf("%s[%d]: no metadata.name", f, i)
			}
		}
	}
	return o
}

// name decodes doc strictly into obj and returns its name.
func name(t *testing.T, file, doc string, obj interface{ GetName() string }) string {
	t.Helper()
	if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
		t.Fatalf("%s: %s: %v", file, obj.GetName(), err)
	}
	return obj.GetName()
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// TestKubernetesObjectsDecodeStrictly: the objects are the ones the
// gateway needs, each decodes strictly, and they refer to each other by
// the right names, labels and ports.
func TestKubernetesObjectsDecodeStrictly(t *testing.T) {
	o := loadKubernetes(t)
	d := o.deployments["gateway"]
	if d == nil || o.configMaps["gateway-config"] == nil || o.services["gateway"] == nil ||
		o.pdbs["gateway"] == nil || o.secrets["gateway-secrets"] == nil || o.statefulSets["redis"] == nil || o.services["redis"] == nil {
		t.Fatalf("want a Deployment, ConfigMap, Service, PodDisruptionBudget, Secret and a Redis StatefulSet and Service, got %+v", o)
	}
	podLabels := d.Spec.Template.Labels
	matches := func(sel map[string]string, labels map[string]string) bool {
		for k, v := range sel {
			if labels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	if !matches(d.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("the Deployment's selector %v does not match its pods %v", d.Spec.Selector.MatchLabels, podLabels)
	}
	if !matches(o.pdbs["gateway"].Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("the PodDisruptionBudget selects %v, not the gateway's pods", o.pdbs["gateway"].Spec.Selector.MatchLabels)
	}
	c := d.Spec.Template.Spec.Containers[0]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for _, svc := range []string{"gateway", "gateway-admin"} {
		s := o.services[svc]
		if s == nil || !matches(s.Spec.Selector, podLabels) {
			t.Errorf("Service %s missing or not selecting the gateway's pods", svc)
			continue
		}
		for _, p := range s.Spec.Ports {
			if _, ok := ports[p.TargetPort.StrVal]; !ok {
				t.Errorf("Service %s targets port %q, which the container does not name", svc, p.TargetPort.StrVal)
			}
		}
	}
	if p := o.services["gateway"].Spec.Ports; len(p) != 1 || p[0].TargetPort.StrVal != "http" {
		t.Errorf("the clients' Service must expose the proxy's port alone, got %+v", p)
	}
	rs := o.statefulSets["redis"]
	if !matches(o.services["redis"].Spec.Selector, rs.Spec.Template.Labels) || rs.Spec.ServiceName != "redis" {
		t.Errorf("the redis Service does not select the StatefulSet's pods")
	}
}

// TestDeploymentRunsTheGatewaySafely: probes on the admin port's /healthz
// and /readyz, a preStop sleep (no shell in the image) that the grace
// period covers along with the drain, resources, non-root and a read-only
// root filesystem, and the config mounted as a directory (a subPath mount
// would never see the ConfigMap's updates).
func TestDeploymentRunsTheGatewaySafely(t *testing.T) {
	o := loadKubernetes(t)
	d := o.deployments["gateway"]
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.StrVal != "admin" {
		t.Errorf("liveness probe: got %+v, want GET /healthz on admin", p)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.StrVal != "admin" {
		t.Errorf("readiness probe: got %+v, want GET /readyz on admin", p)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Exec != nil {
		t.Fatalf("preStop: got %+v, want Kubernetes' sleep action (the image has no shell)", c.Lifecycle)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources: got %+v, want cpu and memory requests and a memory limit", c.Resources)
	}
	sc, psc := c.SecurityContext, pod.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("container securityContext: got %+v, want a read-only root filesystem and no privilege escalation", sc)
	}
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("pod securityContext: got %+v, want non-root", psc)
	}
	var mounted bool
	for _, m := range c.VolumeMounts {
		if m.MountPath == "/etc/gateway" {
			mounted = m.SubPath == ""
		}
	}
	if !mounted || !slices.Contains(c.Args, "/etc/gateway/gateway.yaml") {
		t.Errorf("config: want the ConfigMap mounted as the directory /etc/gateway (no subPath) and -config /etc/gateway/gateway.yaml; mounts %+v args %v", c.VolumeMounts, c.Args)
	}
	snap := configMapSnapshot(t, o)
	drain := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds)*time.Second + snap.Config.Server.ShutdownTimeout
	if grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second; grace <= drain {
		t.Errorf("terminationGracePeriodSeconds %v: want more than preStop sleep + server.shutdown_timeout = %v", grace, drain)
	}
	if pdb := o.pdbs["gateway"]; pdb.Spec.MaxUnavailable == nil && pdb.Spec.MinAvailable == nil {
		t.Error("the PodDisruptionBudget bounds nothing")
	}
}

// configMapSnapshot validates the ConfigMap's gateway.yaml as the gateway
// does at start, with the Deployment's environment (secrets from the
// example Secret).
func configMapSnapshot(t *testing.T, o objects) *policies.Snapshot {
	t.Helper()
	data := o.configMaps["gateway-config"].Data["gateway.yaml"]
	if data == "" {
		t.Fatal("the ConfigMap has no gateway.yaml")
	}
	c := o.deployments["gateway"].Spec.Template.Spec.Containers[0]
	var env []string
	for _, e := range c.Env {
		v := e.Value
		if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil {
			s := o.secrets[r.SecretKeyRef.Name]
			if s == nil || s.StringData[r.SecretKeyRef.Key] == "" {
				t.Fatalf("env %s: no secret %s key %s", e.Name, r.SecretKeyRef.Name, r.SecretKeyRef.Key)
			}
			v = s.StringData[r.SecretKeyRef.Key]
		}
		env = append(env, e.Name+"="+v)
	}
	snap, err := policies.Parse("kubernetes/configmap.yaml: gateway.yaml", []byte(data), policies.Options{Env: env})
	if err != nil {
		t.Fatalf("the ConfigMap's gateway.yaml does not pass validation:\n%v", err)
	}
	for _, w := range snap.Warnings {
		t.Errorf("warning: %v", w)
	}
	return snap
}

// TestConfigMapHoldsNoSecret: the ConfigMap's gateway.yaml validates;
// tenants' keys are digests that still find their tenants; the admin token
// and the Redis password are not in it; Redis is the example Service.
func TestConfigMapHoldsNoSecret(t *testing.T) {
	o := loadKubernetes(t)
	snap := configMapSnapshot(t, o)
	if len(snap.Tenants.Keys) != 0 || len(snap.Tenants.Digests) == 0 {
		t.Errorf("tenants: got %d keys and %d digests, want digests only", len(snap.Tenants.Keys), len(snap.Tenants.Digests))
	}
	for key, want := range map[string]string{"sk-demo-free": "acme", "sk-demo-pro": "globex"} {
		if tn, ok := snap.Tenants.Lookup(key); !ok || tn.Name != want {
			t.Errorf("key %s: got %q, want tenant %s by its digest", key, tn.Name, want)
		}
		sum := sha256.Sum256([]byte(key))
		if !strings.Contains(o.configMaps["gateway-config"].Data["gateway.yaml"], hex.EncodeToString(sum[:])) {
			t.Errorf("no digest of %s", key)
		}
	}
	raw, _ := os.ReadFile("kubernetes/configmap.yaml")
	for _, s := range o.secrets["gateway-secrets"].StringData {
		if bytes.Contains(raw, []byte(s)) {
			t.Errorf("the ConfigMap holds the secret %q", s)
		}
	}
	if snap.Config.Admin.Token == "" || snap.Config.Redis.Password == "" {
		t.Error("the admin token and the Redis password should come from the Secret through the environment")
	}
	if !slices.Contains(snap.Config.Redis.Addrs, "redis:6379") {
		t.Errorf("redis.addrs %v: want the example Service redis:6379", snap.Config.Redis.Addrs)
	}
	if *snap.Config.Admin.Listen != "0.0.0.0:9090" {
		t.Errorf("admin.listen %q: want the pod's address for the probes", *snap.Config.Admin.Listen)
	}
}
