package docs_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// module is the project's module path.
const module = "github.com/leasewatch/leasewatch"

// importRules are the import rules of ARCHITECTURE.md ("Import rules"),
// each over the packages at or below a path of the module (only the package
// itself when exact) and what none of them may import, directly or through
// other packages. They are the non-test files' imports, as `go list -deps`
// shows them: a test may use whatever it needs.
var importRules = []struct {
	rule      string
	subject   string
	exact     bool
	forbidden func(p listedPackage) bool
}{
	{"audit imports only the standard library", "audit", true,
		func(p listedPackage) bool { return !p.Standard }},
	{"views imports no package of the project", "views", false,
		func(p listedPackage) bool { return project(p.ImportPath) }},
	{"collectors import neither web nor a store", "collectors", false,
		func(p listedPackage) bool { return within(p.ImportPath, "web", "audit/sqlite", "audit/postgres") }},
	{"web imports no store", "web", false,
		func(p listedPackage) bool { return within(p.ImportPath, "audit/sqlite", "audit/postgres") }},
}

// allowedImports are the imports the rules make an exception for, as
// ARCHITECTURE.md states them: the collectors' contract suite stores into a
// real SQLite store. A package that reaches a store only through one of
// them passes.
var allowedImports = map[[2]string]bool{
	{"collectors/collectortest", "audit/sqlite"}: true,
}

// listedPackage is what `go list -json` says of a package.
type listedPackage struct {
	ImportPath string
	Standard   bool
	Imports    []string
}

// TestImportRules fails, naming the chain of imports, on each package that
// breaks an import rule.
func TestImportRules(t *testing.T) {
	for _, v := range importViolations(goListDeps(t)) {
		t.Error(v)
	}
}

// TestImportRulesCatchViolations checks the checker on a made-up module
// where each rule is broken once, through another package where it can be,
// and the exception is used once.
func TestImportRulesCatchViolations(t *testing.T) {
	pkgs := map[string]listedPackage{}
	add := func(path string, std bool, imports ...string) {
		pkgs[path] = listedPackage{ImportPath: path, Standard: std, Imports: imports}
	}
	add("time", true)
	add("github.com/redis/go-redis/v9", false, "time")
	add(module+"/audit", false, "time", "github.com/redis/go-redis/v9")
	add(module+"/views", false, module+"/audit")
	add(module+"/audit/sqlite", false, module+"/audit")
	add(module+"/audit/postgres", false, module+"/audit")
	add(module+"/web", false, module+"/audit/query")
	add(module+"/audit/query", false, module+"/audit/postgres")
	add(module+"/collectors", false, module+"/audit")
	add(module+"/collectors/redis", false, module+"/collectors", module+"/web")
	add(module+"/collectors/collectortest", false, module+"/audit/sqlite")
	want := []string{
		"audit imports github.com/redis/go-redis/v9 (audit → github.com/redis/go-redis/v9): audit imports only the standard library",
		"collectors/redis imports web (collectors/redis → web): collectors import neither web nor a store",
		"views imports audit (views → audit): views imports no package of the project",
		"web imports audit/postgres (web → audit/query → audit/postgres): web imports no store",
	}
	got := importViolations(pkgs)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n got %q\nwant %q", got, want)
	}
}

// goListDeps lists the module's packages and every package they import,
// directly or not.
func goListDeps(t *testing.T) map[string]listedPackage {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list imports: %v", err)
	}
	cmd := exec.Command(gobin, "list", "-deps", "-json=ImportPath,Standard,Imports", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./...: %v\n%s", err, stderr.String())
	}
	pkgs := map[string]listedPackage{}
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list -deps ./...: %v", err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

// importViolations returns one line for each package of pkgs that breaks a
// rule, naming the first forbidden package it reaches and how. A rule that
// applies to no package is a violation too: its packages moved.
func importViolations(pkgs map[string]listedPackage) []string {
	var out []string
	for _, r := range importRules {
		subjects := 0
		for _, path := range slices.Sorted(maps.Keys(pkgs)) {
			if path != module+"/"+r.subject && (r.exact || !within(path, r.subject)) {
				continue
			}
			subjects++
			if chain := forbiddenChain(pkgs, path, r.forbidden); chain != nil {
				out = append(out, fmt.Sprintf("%s imports %s (%s): %s", chain[0], chain[len(chain)-1], strings.Join(chain, " → "), r.rule))
			}
		}
		if subjects == 0 {
			out = append(out, fmt.Sprintf("no package %s in the module: update the rule %q here and in ARCHITECTURE.md", r.subject, r.rule))
		}
	}
	return out
}

// forbiddenChain returns the shortest chain of imports from the package
// from to a package forbidden says it may not import, each named without
// the module's path, or nil if it reaches none. allowedImports are not
// followed.
func forbiddenChain(pkgs map[string]listedPackage, from string, forbidden func(listedPackage) bool) []string {
	parent := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		path := queue[0]
		queue = queue[1:]
		for _, imp := range pkgs[path].Imports {
			if _, seen := parent[imp]; seen || allowedImports[[2]string{shortPath(path), shortPath(imp)}] {
				continue
			}
			parent[imp] = path
			if p, ok := pkgs[imp]; ok && forbidden(p) {
				var chain []string
				for at := imp; at != ""; at = parent[at] {
					chain = append(chain, shortPath(at))
				}
				slices.Reverse(chain)
				return chain
			}
			queue = append(queue, imp)
		}
	}
	return nil
}

// project reports whether path is a package of the module.
func project(path string) bool {
	return path == module || strings.HasPrefix(path, module+"/")
}

// within reports whether path is one of the module's packages names, or
// below one.
func within(path string, names ...string) bool {
	for _, n := range names {
		if path == module+"/"+n || strings.HasPrefix(path, module+"/"+n+"/") {
			return true
		}
	}
	return false
}

// shortPath is path without the module's, for messages.
func shortPath(path string) string {
	if name, ok := strings.CutPrefix(path, module+"/"); ok {
		return name
	}
	return path
}
