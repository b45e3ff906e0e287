package app

import (
	"os"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// The kustomize install grants what the picker does and no more: leader
// election reads, creates and renews the Lease of the pool it serves, and
// nothing else of the namespace's Leases; the rewrite controller patches the
// status of model rewrites.
func TestKustomizeRolesGrantWhatThePickerDoes(t *testing.T) {
	const config = "../../../config/"
	var roles []rbacv1.Role
	for _, file := range []string{"rbac/role.yaml", "rbac/leader_election_role.yaml"} {
		for _, doc := range yamlDocs(t, config+file) {
			var r rbacv1.Role
			if err := yaml.UnmarshalStrict([]byte(doc), &r); err == nil && r.Kind == "Role" {
				roles = append(roles, r)
			}
		}
	}
	var dep appsv1.Deployment
	if err := yaml.Unmarshal([]byte(yamlDocs(t, config+"manager/manager.yaml")[0]), &dep); err != nil {
		t.Fatal(err)
	}
	var o Options
	for _, arg := range dep.Spec.Template.Spec.Containers[0].Args {
		if name, ok := strings.CutPrefix(arg, "--pool-name="); ok {
			o.PoolName = name
		}
	}
	lease := o.leaderElectionID()

	type access struct {
		verb, group, resource, name string
	}
	allowed := []access{
		{"get", "coordination.k8s.io", "leases", lease},
		{"update", "coordination.k8s.io", "leases", lease},
		{"create", "coordination.k8s.io", "leases", ""},
		{"patch", "inference.networking.x-k8s.io", "inferencemodelrewrites/status", "canary"},
	}
	denied := []access{
		{"get", "coordination.k8s.io", "leases", "another-controller"},
		{"update", "coordination.k8s.io", "leases", "another-controller"},
		{"delete", "coordination.k8s.io", "leases", lease},
		{"list", "coordination.k8s.io", "leases", ""},
		{"watch", "coordination.k8s.io", "leases", ""},
		{"get", "inference.networking.x-k8s.io", "inferencemodelrewrites/status", "canary"},
		{"update", "inference.networking.x-k8s.io", "inferencemodelrewrites/status", "canary"},
	}
	for _, a := range allowed {
		if !grants(roles, a.verb, a.group, a.resource, a.name) {
			t.Errorf("%s %s/%s %q is denied; the picker needs it", a.verb, a.group, a.resource, a.name)
		}
	}
	for _, a := range denied {
		if grants(roles, a.verb, a.group, a.resource, a.name) {
			t.Errorf("%s %s/%s %q is granted; the picker never does it", a.verb, a.group, a.resource, a.name)
		}
	}
}

// grants reports whether a rule of roles allows verb on the named object
// ("" for a request without a name: create, list, watch), as RBAC does.
func grants(roles []rbacv1.Role, verb, group, resource, name string) bool {
	for i := range roles {
		for _, rule := range roles[i].Rules {
			if slices.Contains(rule.Verbs, verb) && slices.Contains(rule.APIGroups, group) &&
				slices.Contains(rule.Resources, resource) &&
				(len(rule.ResourceNames) == 0 || name != "" && slices.Contains(rule.ResourceNames, name)) {
				return true
			}
		}
	}
	return false
}

func yamlDocs(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(string(raw), "\n---\n")
}
