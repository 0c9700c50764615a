// Package deploy_test checks the container build and the deployment examples
// without a container runtime: the Dockerfile's binary is built here with the
// same script (scripts/build-static.sh) and must come out byte-identical from
// two checkouts and statically linked; the Dockerfile, the compose example and
// the Kubernetes manifests are parsed and checked against each other, against
// the binary's flags and against the endpoints it serves.
//
// FLOODGATE_REPRO_COLD=1 makes the second build use an empty build cache
// (every package compiled again: about a minute) instead of the shared one.
package deploy_test

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	fg "github.com/floodgate-dev/floodgate"
)

// root is the module's root directory; tests run in deploy/.
const root = ".."

const buildScript = "scripts/build-static.sh"

var tmpRoot string // removed by TestMain

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "floodgate-deploy-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tmpRoot = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func skipUnlessBuildable(t *testing.T) {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("scripts/build-static.sh is a POSIX shell script")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
}

// runBuildScript runs scripts/build-static.sh of the module at moduleDir,
// writing the binary to out.
func runBuildScript(t *testing.T, moduleDir, out string, env ...string) {
	t.Helper()
	cmd := exec.Command("sh", filepath.Join(moduleDir, buildScript), out)
	cmd.Dir = t.TempDir() // the script must not depend on the caller's directory
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", buildScript, out, err, b)
	}
}

var built struct {
	once sync.Once
	bin  string
	err  error
}

// staticBinary is floodgate built from this tree by scripts/build-static.sh,
// as the Dockerfile builds it; built once per test run.
func staticBinary(t *testing.T) string {
	t.Helper()
	skipUnlessBuildable(t)
	built.once.Do(func() {
		dir := filepath.Join(tmpRoot, "a")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			built.err = err
			return
		}
		bin := filepath.Join(dir, "floodgate")
		cmd := exec.Command("sh", filepath.Join(root, buildScript), bin)
		if b, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("%s: %v\n%s", buildScript, err, b)
			return
		}
		built.bin = bin
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// TestStaticBuildReproducible builds the binary with the Dockerfile's build
// script twice, from this tree and from a copy of it in another directory, and
// requires the same bytes, static linking, the script's flags in the build
// information, no path of this machine, and a working `floodgate version`.
func TestStaticBuildReproducible(t *testing.T) {
	a := staticBinary(t)

	// A copy of the module elsewhere (no .git, no nested modules), as
	// Docker's COPY puts it in /src.
	absRoot, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "elsewhere", "floodgate")
	copyModule(t, absRoot, cp)
	b := filepath.Join(t.TempDir(), "floodgate")
	var env []string
	if os.Getenv("FLOODGATE_REPRO_COLD") != "" {
		env = append(env, "GOCACHE="+t.TempDir())
		t.Log("second build with an empty build cache")
	}
	runBuildScript(t, cp, b, env...)

	ab, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	bb, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ab, bb) {
		t.Fatalf("two builds differ: %d bytes from %s, %d bytes from %s", len(ab), absRoot, len(bb), cp)
	}
	t.Logf("two builds: %d identical bytes", len(ab))

	// No path of this machine: the checkouts, GOROOT, the module cache.
	leaks := []string{absRoot, cp, filepath.Dir(a)}
	for _, v := range []string{"GOROOT", "GOMODCACHE", "GOPATH"} {
		out, err := exec.Command("go", "env", v).Output()
		if p := strings.TrimSpace(string(out)); err == nil && p != "" {
			leaks = append(leaks, p)
		}
	}
	for _, p := range leaks {
		if bytes.Contains(ab, []byte(p)) {
			t.Errorf("the binary contains the path %s", p)
		}
	}

	// The build information records the script's settings.
	info, err := buildinfo.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	// (With -trimpath, go records no -ldflags: the ELF checks below see them.)
	for k, want := range map[string]string{
		"CGO_ENABLED": "0",
		"-trimpath":   "true",
	} {
		if settings[k] != want {
			t.Errorf("build setting %s = %q, want %q (all: %v)", k, settings[k], want, settings)
		}
	}
	for k := range settings {
		if strings.HasPrefix(k, "vcs") {
			t.Errorf("build setting %s recorded: the bytes would depend on .git", k)
		}
	}
	if goV := dockerfileGoVersion(t); "go"+goV == info.GoVersion {
		t.Logf("built with %s, the Dockerfile's GO_VERSION: the image's %s/%s binary is these bytes", info.GoVersion, runtime.GOOS, runtime.GOARCH)
	} else {
		t.Logf("built with %s; the Dockerfile pins go%s, whose bytes differ from these", info.GoVersion, goV)
	}

	// Statically linked: no program interpreter, no dynamic section.
	if runtime.GOOS == "linux" {
		f, err := elf.Open(a)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
				t.Errorf("program header %v: not statically linked", p.Type)
			}
		}
		for _, name := range []string{".interp", ".dynamic", ".dynsym"} {
			if f.Section(name) != nil {
				t.Errorf("section %s: not statically linked", name)
			}
		}
		if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
			t.Errorf("imports shared libraries %v", libs)
		}
		for _, sec := range f.Sections {
			if sec.Name == ".symtab" || strings.HasPrefix(sec.Name, ".debug_") || strings.HasPrefix(sec.Name, ".zdebug_") {
				t.Errorf("section %s: -ldflags '-s -w' was not applied", sec.Name)
			}
		}
	}

	// -ldflags -buildid=: no Go build ID.
	if id, err := exec.Command("go", "tool", "buildid", a).Output(); err != nil || strings.TrimSpace(string(id)) != "" {
		t.Errorf("go tool buildid: %q %v, want an empty build ID", id, err)
	}

	// It runs: `floodgate version` names this release and the Go version.
	out, err := exec.Command(a, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("floodgate version: %v\n%s", err, out)
	}
	want := "floodgate v" + fg.Version + " " + info.GoVersion
	if got := strings.TrimSpace(string(out)); got != want {
		t.Errorf("floodgate version = %q, want %q", got, want)
	}
}

// copyModule copies the module at src to dst without .git and without
// directories that are modules of their own (bench/).
func copyModule(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			if rel != "." {
				if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, fi.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A Dockerfile instruction: its keyword (upper case) and its arguments.
type instruction struct {
	cmd, args string
	line      int
}

// stage is one FROM ... of a Dockerfile.
type stage struct {
	from, name string
	ins        []instruction
}

// parseDockerfile reads a Dockerfile's instructions: comments dropped,
// continuation lines joined; the instructions before the first FROM are
// stage 0's (with from "").
func parseDockerfile(t *testing.T, file string) []stage {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	stages := []stage{{}}
	var cur strings.Builder
	start := 0
	for i, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur.Len() > 0 && strings.HasPrefix(trimmed, "#") {
			continue // a comment inside a continued instruction
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		cur.Reset()
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start}
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			f = slices.DeleteFunc(f, func(s string) bool { return strings.HasPrefix(s, "--platform=") })
			st := stage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			stages = append(stages, st)
			continue
		}
		stages[len(stages)-1].ins = append(stages[len(stages)-1].ins, in)
	}
	return stages
}

func (s stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.ins {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// jsonArgs decodes an exec-form ENTRYPOINT or CMD.
func jsonArgs(t *testing.T, in instruction) []string {
	t.Helper()
	var v []string
	if err := json.Unmarshal([]byte(in.args), &v); err != nil {
		t.Fatalf("Dockerfile:%d: %s is not in exec form (a JSON array): %v", in.line, in.cmd, err)
	}
	return v
}

// dockerfileGoVersion is the Dockerfile's ARG GO_VERSION default.
func dockerfileGoVersion(t *testing.T) string {
	t.Helper()
	for _, in := range parseDockerfile(t, filepath.Join(root, "Dockerfile"))[0].all("ARG") {
		if v, ok := strings.CutPrefix(in.args, "GO_VERSION="); ok {
			return v
		}
	}
	t.Fatal("Dockerfile: no ARG GO_VERSION=... before the first FROM")
	return ""
}

// goModVersion is the go line of go.mod.
func goModVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(data)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	return string(m[1])
}

// versionAtLeast compares dotted release versions (1.26.8 >= 1.26.0).
func versionAtLeast(v, min string) bool {
	a, b := strings.Split(v, "."), strings.Split(min, ".")
	for i := 0; i < max(len(a), len(b)); i++ {
		x, y := 0, 0
		if i < len(a) {
			x, _ = strconv.Atoi(a[i])
		}
		if i < len(b) {
			y, _ = strconv.Atoi(b[i])
		}
		if x != y {
			return x > y
		}
	}
	return true
}

// dockerImage is what the Dockerfile says about the image the test needs
// elsewhere.
type dockerImage struct {
	binary     string   // where the final stage puts the binary
	entrypoint []string // ENTRYPOINT
	cmd        []string // CMD
	user       string   // the final stage's USER
	expose     []string // EXPOSE
	copies     map[string]string
}

// TestDockerfile checks the Dockerfile: a Go builder at a version go.mod
// accepts, pinned, that builds only through scripts/build-static.sh; a
// distroless (or scratch) final stage with the script's output, a non-root
// USER, ports 8080 and 8081, `floodgate serve` as its entry point and a
// default configuration that floodgate accepts.
func TestDockerfile(t *testing.T) {
	img := checkDockerfile(t)
	if _, err := os.Stat(filepath.Join(root, buildScript)); err != nil {
		t.Fatal(err)
	}
	// The default CMD's configuration is in the image, and valid.
	cfg := flagValue(img.cmd, "config")
	var src string
	for dst, s := range img.copies {
		if strings.HasPrefix(dst, cfg) || dst == strings.TrimSuffix(cfg, "/") {
			src = s
		}
	}
	if src == "" {
		t.Fatalf("CMD's --config %s: nothing is copied there", cfg)
	}
	configCheck(t, filepath.Join(root, src))
}

func checkDockerfile(t *testing.T) dockerImage {
	t.Helper()
	stages := parseDockerfile(t, filepath.Join(root, "Dockerfile"))
	if len(stages) != 3 {
		t.Fatalf("Dockerfile: %d stages, want a builder and a final stage", len(stages)-1)
	}
	build, final := stages[1], stages[2]

	goV, modV := dockerfileGoVersion(t), goModVersion(t)
	if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(goV) {
		t.Errorf("GO_VERSION %q: pin a release (1.N.P)", goV)
	}
	if !versionAtLeast(goV, modV) {
		t.Errorf("GO_VERSION %s is older than go.mod's go %s", goV, modV)
	}
	if !strings.HasPrefix(build.from, "golang:${GO_VERSION}") {
		t.Errorf("builder FROM %s, want golang:${GO_VERSION}", build.from)
	}
	if !slices.ContainsFunc(build.all("ENV"), func(in instruction) bool { return strings.Contains(in.args, "GOTOOLCHAIN=local") }) {
		t.Error("builder: no ENV GOTOOLCHAIN=local (go could switch to another toolchain than the pinned one)")
	}

	// The only build is the script's; its output is what the final stage copies.
	var out string
	for _, st := range stages {
		for _, in := range st.all("RUN") {
			if strings.Contains(in.args, "go build") || strings.Contains(in.args, "go install") {
				t.Errorf("Dockerfile:%d: builds with its own flags; run %s instead", in.line, buildScript)
			}
			if _, after, ok := strings.Cut(in.args, "./"+buildScript+" "); ok {
				out = strings.Fields(after)[0]
			}
		}
	}
	if out == "" {
		t.Fatalf("Dockerfile: no RUN ./%s OUTPUT", buildScript)
	}

	if !strings.HasPrefix(final.from, "gcr.io/distroless/static") && final.from != "scratch" {
		t.Errorf("final stage FROM %s, want gcr.io/distroless/static... or scratch", final.from)
	}
	img := dockerImage{copies: map[string]string{}}
	for _, in := range final.all("COPY") {
		f := strings.Fields(in.args)
		if f[0] == "--from="+build.name {
			if f[1] == out {
				img.binary = f[2]
			}
			continue
		}
		if len(f) == 2 {
			img.copies[f[1]] = f[0]
		}
	}
	if img.binary == "" {
		t.Fatalf("final stage: no COPY --from=%s %s", build.name, out)
	}

	users := final.all("USER")
	if len(users) == 0 {
		t.Fatal("final stage: no USER; the container would run as root")
	}
	img.user = users[len(users)-1].args
	uid, _, _ := strings.Cut(img.user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("USER %s: want a numeric non-root UID (Kubernetes' runAsNonRoot cannot verify a name)", img.user)
	}

	for _, in := range final.all("EXPOSE") {
		img.expose = append(img.expose, strings.Fields(in.args)...)
	}
	for _, p := range []string{"8080", "8081"} {
		if !slices.Contains(img.expose, p) {
			t.Errorf("EXPOSE %v: no %s", img.expose, p)
		}
	}
	if e := final.all("ENTRYPOINT"); len(e) != 1 {
		t.Fatalf("final stage: %d ENTRYPOINTs", len(e))
	} else if img.entrypoint = jsonArgs(t, e[0]); !slices.Equal(img.entrypoint, []string{img.binary, "serve"}) {
		t.Errorf("ENTRYPOINT %q, want [%s serve]", img.entrypoint, img.binary)
	}
	if c := final.all("CMD"); len(c) == 1 {
		img.cmd = jsonArgs(t, c[0])
	}
	return img
}

// flagValue is the value of --name in args (--name=v or --name v), or "".
func flagValue(args []string, name string) string {
	for i, a := range args {
		a = "-" + strings.TrimLeft(a, "-")
		if v, ok := strings.CutPrefix(a, "-"+name+"="); ok {
			return v
		}
		if a == "-"+name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// configCheck runs `floodgate config check` on a file or directory.
func configCheck(t *testing.T, p string) {
	t.Helper()
	out, err := exec.Command(staticBinary(t), "config", "check", p).CombinedOutput()
	if err != nil {
		t.Errorf("floodgate config check %s: %v\n%s", p, err, out)
	}
}

// TestDockerignoreKeepsBuildInputs checks that .dockerignore leaves in the
// build context every file the build reads: each Go and embedded file of the
// module's packages that cmd/floodgate imports, go.mod, go.sum, and the
// Dockerfile's COPY sources.
func TestDockerignoreKeepsBuildInputs(t *testing.T) {
	skipUnlessBuildable(t)
	data, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []*regexp.Regexp
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") {
			t.Fatalf(".dockerignore: exceptions (%s) are not understood by this test", line)
		}
		patterns = append(patterns, ignorePattern(line))
	}
	ignored := func(rel string) bool {
		for p := rel; p != "." && p != "/"; p = path.Dir(p) {
			for _, re := range patterns {
				if re.MatchString(p) {
					return true
				}
			}
		}
		return false
	}

	cmd := exec.Command("go", "list", "-deps", "-f",
		`{{if .Module}}{{if .Module.Main}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}
{{end}}{{end}}{{end}}`, "./cmd/floodgate")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	absRoot, _ := filepath.Abs(root)
	files := []string{"go.mod", "go.sum", buildScript}
	for _, f := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(absRoot, f)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	for _, st := range parseDockerfile(t, filepath.Join(root, "Dockerfile")) {
		for _, in := range st.all("COPY") {
			f := strings.Fields(in.args)
			if strings.HasPrefix(f[0], "--") {
				continue
			}
			for _, src := range f[:len(f)-1] {
				if src != "." {
					files = append(files, src)
				}
			}
		}
	}
	if len(files) < 50 {
		t.Fatalf("only %d build inputs listed: %q", len(files), files)
	}
	for _, f := range files {
		if ignored(f) {
			t.Errorf(".dockerignore excludes %s, which the image build reads", f)
		}
	}
}

// ignorePattern compiles a .dockerignore pattern: anchored at the context's
// root, * and ? within one path element, ** across elements.
func ignorePattern(p string) *regexp.Regexp {
	p = strings.Trim(path.Clean(p), "/")
	var re strings.Builder
	re.WriteString("^")
	for i := 0; i < len(p); i++ {
		switch {
		case strings.HasPrefix(p[i:], "**/"):
			re.WriteString("(.*/)?")
			i += 2
		case strings.HasPrefix(p[i:], "**"):
			re.WriteString(".*")
			i++
		case p[i] == '*':
			re.WriteString("[^/]*")
		case p[i] == '?':
			re.WriteString("[^/]")
		default:
			re.WriteString(regexp.QuoteMeta(p[i : i+1]))
		}
	}
	re.WriteString("$")
	return regexp.MustCompile(re.String())
}

// yamlFile decodes every document of a YAML file.
func yamlFile(t *testing.T, file string) []map[string]any {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var docs []map[string]any
	dec := yaml.NewDecoder(f)
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return docs
			}
			t.Fatalf("%s: %v", file, err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
}

// get walks a decoded YAML value: string keys into mappings, int indexes
// into sequences; nil when absent.
func get(v any, keys ...any) any {
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			s, ok := v.([]any)
			if !ok || k >= len(s) {
				return nil
			}
			v = s[k]
		}
	}
	return v
}

func str(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

func list(v any) []any {
	s, _ := v.([]any)
	return s
}

func strs(v any) []string {
	var out []string
	for _, e := range list(v) {
		out = append(out, str(e))
	}
	return out
}

// domainsAndKeys reads floodgate configuration files (a directory's *.yaml)
// and returns each domain's top-level descriptor keys, as "key" and, for
// those with a value, "key=value" too.
func domainsAndKeys(t *testing.T, dir string) map[string][]string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if len(files) == 0 {
		t.Fatalf("%s: no *.yaml", dir)
	}
	out := map[string][]string{}
	for _, f := range files {
		for _, doc := range yamlFile(t, f) {
			d := str(doc["domain"])
			for _, desc := range list(doc["descriptors"]) {
				k := str(get(desc, "key"))
				out[d] = append(out[d], k)
				if v := str(get(desc, "value")); v != "" {
					out[d] = append(out[d], k+"="+v)
				}
			}
		}
	}
	return out
}

// TestCompose checks deploy/docker-compose.yml and its Envoy files: floodgate
// built from the Dockerfile with deploy/config/ mounted as its --config (a
// configuration floodgate accepts), on the redis service; Envoy's rate limit
// filter pointing at floodgate's gRPC port over HTTP/2 in the configuration's
// domain, every rate limited route sending a descriptor the configuration
// limits, and the backend cluster at the backend's listener.
func TestCompose(t *testing.T) {
	compose := yamlFile(t, "docker-compose.yml")[0]
	services, _ := compose["services"].(map[string]any)
	for _, name := range []string{"redis", "floodgate", "envoy-proxy", "backend"} {
		if services[name] == nil {
			t.Fatalf("docker-compose.yml: no service %s", name)
		}
	}
	// mounts of a service: container path -> host path (relative to deploy/).
	mounts := func(svc string) map[string]string {
		m := map[string]string{}
		for _, v := range strs(get(services, svc, "volumes")) {
			f := strings.Split(v, ":")
			if len(f) < 2 {
				t.Fatalf("%s: volume %q", svc, v)
			}
			if _, err := os.Stat(f[0]); err != nil {
				t.Errorf("%s: volume %q: %v", svc, v, err)
			}
			m[strings.TrimSuffix(f[1], "/")] = f[0]
		}
		return m
	}

	fgs := get(services, "floodgate")
	ctx := str(get(fgs, "build", "context"))
	df := str(get(fgs, "build", "dockerfile"))
	if _, err := os.Stat(filepath.Join(ctx, df)); err != nil || filepath.Clean(ctx) != root {
		t.Errorf("floodgate build: context %q dockerfile %q, want the module root's Dockerfile", ctx, df)
	}
	args := strs(get(fgs, "command"))
	cfg := strings.TrimSuffix(flagValue(args, "config"), "/")
	host, ok := mounts("floodgate")[cfg]
	if !ok {
		t.Fatalf("floodgate --config %s is not a mounted volume", cfg)
	}
	configCheck(t, host)
	domains := domainsAndKeys(t, host)
	redisHost := strings.Split(strings.TrimPrefix(flagValue(args, "redis"), "redis://"), ":")[0]
	if services[redisHost] == nil {
		t.Errorf("floodgate --redis %s: no such service", flagValue(args, "redis"))
	}
	if g := flagValue(args, "grpc-addr"); g != "" && g != ":8081" {
		t.Errorf("floodgate --grpc-addr %s; the Envoy example expects :8081", g)
	}
	ports := strs(get(fgs, "ports"))
	for _, p := range []string{"8080:8080", "8081:8081"} {
		if !slices.Contains(ports, p) {
			t.Errorf("floodgate ports %q: no %s", ports, p)
		}
	}

	// Envoy: configuration file from its --config-path mount.
	envoyConfig := func(svc string) map[string]any {
		cp := flagValue(strs(get(services, svc, "command")), "config-path")
		host, ok := mounts(svc)[cp]
		if !ok {
			t.Fatalf("%s --config-path %s is not a mounted file", svc, cp)
		}
		return yamlFile(t, host)[0]
	}
	proxy, backend := envoyConfig("envoy-proxy"), envoyConfig("backend")
	serviceCluster := flagValue(strs(get(services, "envoy-proxy", "command")), "service-cluster")

	// cluster name -> "host:port" of its one endpoint, and whether it speaks HTTP/2.
	endpoints, h2 := map[string]string{}, map[string]bool{}
	for _, c := range list(get(proxy, "static_resources", "clusters")) {
		name := str(get(c, "name"))
		sa := get(c, "load_assignment", "endpoints", 0, "lb_endpoints", 0, "endpoint", "address", "socket_address")
		endpoints[name] = str(get(sa, "address")) + ":" + str(get(sa, "port_value"))
		h2[name] = get(c, "typed_extension_protocol_options", "envoy.extensions.upstreams.http.v3.HttpProtocolOptions", "explicit_http_config", "http2_protocol_options") != nil ||
			get(c, "http2_protocol_options") != nil
	}
	hcm := get(proxy, "static_resources", "listeners", 0, "filter_chains", 0, "filters", 0, "typed_config")
	var rl any
	for _, f := range list(get(hcm, "http_filters")) {
		if str(get(f, "name")) == "envoy.filters.http.ratelimit" {
			rl = get(f, "typed_config")
		}
	}
	if rl == nil {
		t.Fatal("envoy proxy: no envoy.filters.http.ratelimit filter")
	}
	rlCluster := str(get(rl, "rate_limit_service", "grpc_service", "envoy_grpc", "cluster_name"))
	if endpoints[rlCluster] != "floodgate:8081" || !h2[rlCluster] {
		t.Errorf("rate limit service cluster %q: endpoint %q, HTTP/2 %v; want floodgate:8081 over HTTP/2", rlCluster, endpoints[rlCluster], h2[rlCluster])
	}
	if str(get(rl, "rate_limit_service", "transport_api_version")) != "V3" {
		t.Error("rate limit service: transport_api_version is not V3")
	}
	domain := str(get(rl, "domain"))
	keys, ok := domains[domain]
	if !ok {
		t.Fatalf("Envoy's domain %q is not in the configuration (domains: %v)", domain, domains)
	}

	backendPort := str(get(backend, "static_resources", "listeners", 0, "address", "socket_address", "port_value"))
	limited := 0
	for _, r := range list(get(hcm, "route_config", "virtual_hosts", 0, "routes")) {
		cluster := str(get(r, "route", "cluster"))
		if endpoints[cluster] != "backend:"+backendPort {
			t.Errorf("route %v: cluster %q at %q, want the backend service at backend:%s", get(r, "match"), cluster, endpoints[cluster], backendPort)
		}
		for _, lim := range list(get(r, "route", "rate_limits")) {
			limited++
			first := get(lim, "actions", 0).(map[string]any)
			var key string
			switch {
			case first["source_cluster"] != nil:
				key = "source_cluster=" + serviceCluster // Envoy's --service-cluster
			case first["destination_cluster"] != nil:
				key = "destination_cluster"
			case first["request_headers"] != nil:
				key = str(get(first, "request_headers", "descriptor_key"))
			case first["generic_key"] != nil:
				key = str(get(first, "generic_key", "descriptor_key"))
			}
			if !slices.Contains(keys, key) {
				t.Errorf("route %v sends a descriptor starting with %s, which domain %s does not limit (keys %v)", get(r, "match"), key, domain, keys)
			}
		}
	}
	if limited == 0 {
		t.Error("envoy proxy: no route is rate limited")
	}
}

// k8sObjects reads deploy/kubernetes/*.yaml: kind/name -> object.
func k8sObjects(t *testing.T) (map[string]map[string]any, []string) {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("kubernetes/*.yaml: %v %v", files, err)
	}
	objs := map[string]map[string]any{}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
		for _, doc := range yamlFile(t, f) {
			kind, name := str(doc["kind"]), str(get(doc, "metadata", "name"))
			if kind == "" || (name == "" && kind != "Kustomization") {
				t.Errorf("%s: an object without kind or metadata.name", f)
			}
			objs[kind+"/"+name] = doc
		}
	}
	return objs, names
}

// containerPort resolves a probe's or Service's port (a number or a name)
// against a container's ports.
func containerPort(container any, port any) int {
	for _, p := range list(get(container, "ports")) {
		if str(get(p, "name")) == str(port) || str(get(p, "containerPort")) == str(port) {
			n, _ := strconv.Atoi(str(get(p, "containerPort")))
			return n
		}
	}
	return 0
}

func selects(selector, labels any) bool {
	sel, _ := selector.(map[string]any)
	lab, _ := labels.(map[string]any)
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if str(lab[k]) != str(v) {
			return false
		}
	}
	return true
}

// TestKubernetes checks deploy/kubernetes: the floodgate Deployment (2
// replicas, probes on /readyz and /healthz of the HTTP port, resources, a
// non-root read-only container matching the image's USER and ports), its
// ConfigMap mounted at --config, the Service, the demo Redis behind --redis,
// and the kustomization listing them all. Then it starts the built binary
// with the ConfigMap's files and the Deployment's arguments (memory backend,
// local ports) and requires 200 from both probes' paths.
func TestKubernetes(t *testing.T) {
	objs, files := k8sObjects(t)
	kust := objs["Kustomization/"]
	if kust == nil {
		t.Fatal("kubernetes/kustomization.yaml: missing")
	}
	res := strs(kust["resources"])
	for _, f := range files {
		if f != "kustomization.yaml" && !slices.Contains(res, f) {
			t.Errorf("kustomization.yaml does not list %s", f)
		}
	}
	for _, r := range res {
		if !slices.Contains(files, r) {
			t.Errorf("kustomization.yaml lists %s, which is not in kubernetes/", r)
		}
	}

	dep := objs["Deployment/floodgate"]
	if dep == nil {
		t.Fatal("no Deployment floodgate")
	}
	if n := get(dep, "spec", "replicas"); n != 2 {
		t.Errorf("replicas %v, want 2", n)
	}
	pod := get(dep, "spec", "template")
	if !selects(get(dep, "spec", "selector", "matchLabels"), get(pod, "metadata", "labels")) {
		t.Error("the Deployment's selector does not select its pods")
	}
	c := get(pod, "spec", "containers", 0)
	img := checkDockerfile(t)
	for _, p := range list(get(c, "ports")) {
		if !slices.Contains(img.expose, str(get(p, "containerPort"))) {
			t.Errorf("container port %v is not EXPOSEd by the Dockerfile", get(p, "containerPort"))
		}
	}
	httpPort, grpcPort := containerPort(c, "http"), containerPort(c, "grpc")
	if httpPort != 8080 || grpcPort != 8081 {
		t.Errorf("container ports http %d grpc %d, want 8080 and 8081", httpPort, grpcPort)
	}
	probes := map[string]string{} // probe -> the path it GETs
	for probe, want := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
		p := get(c, probe, "httpGet")
		probes[probe] = str(get(p, "path"))
		if probes[probe] != want {
			t.Errorf("%s path %q, want %s", probe, probes[probe], want)
		}
		if port := containerPort(c, get(p, "port")); port != httpPort {
			t.Errorf("%s port %v is %d, not the HTTP port %d", probe, get(p, "port"), port, httpPort)
		}
	}
	for _, r := range []string{"requests.cpu", "requests.memory", "limits.memory"} {
		k, v, _ := strings.Cut(r, ".")
		if str(get(c, "resources", k, v)) == "" {
			t.Errorf("no resources.%s", r)
		}
	}
	if get(pod, "spec", "securityContext", "runAsNonRoot") != true {
		t.Error("pod securityContext: runAsNonRoot is not true")
	}
	uid, _, _ := strings.Cut(img.user, ":")
	if u := str(get(pod, "spec", "securityContext", "runAsUser")); u != "" && u != uid {
		t.Errorf("runAsUser %s, the image's USER is %s", u, img.user)
	}
	sc := get(c, "securityContext")
	if get(sc, "readOnlyRootFilesystem") != true || get(sc, "allowPrivilegeEscalation") != false {
		t.Errorf("container securityContext %v: want readOnlyRootFilesystem true, allowPrivilegeEscalation false", sc)
	}
	if str(get(c, "image")) != "floodgate:dev" && !strings.Contains(str(get(c, "image")), "floodgate") {
		t.Errorf("image %v", get(c, "image"))
	}

	// --config is the ConfigMap's mount.
	args := strs(get(c, "args"))
	cfg := strings.TrimSuffix(flagValue(args, "config"), "/")
	var cmName string
	for _, m := range list(get(c, "volumeMounts")) {
		if strings.TrimSuffix(str(get(m, "mountPath")), "/") != cfg {
			continue
		}
		for _, v := range list(get(pod, "spec", "volumes")) {
			if get(v, "name") == get(m, "name") {
				cmName = str(get(v, "configMap", "name"))
			}
		}
	}
	cm := objs["ConfigMap/"+cmName]
	if cm == nil {
		t.Fatalf("--config %s: not a mounted ConfigMap of kubernetes/", cfg)
	}

	// --redis is the demo Redis Service, which selects the Redis pods.
	redis := strings.TrimPrefix(flagValue(args, "redis"), "redis://")
	rhost, rport, _ := strings.Cut(redis, ":")
	rsvc := objs["Service/"+rhost]
	if rsvc == nil {
		t.Fatalf("--redis %s: no Service %s", redis, rhost)
	}
	if str(get(rsvc, "spec", "ports", 0, "port")) != rport {
		t.Errorf("Service %s port %v, --redis port %s", rhost, get(rsvc, "spec", "ports", 0, "port"), rport)
	}
	rdep := objs["Deployment/"+rhost]
	if rdep == nil || !selects(get(rsvc, "spec", "selector"), get(rdep, "spec", "template", "metadata", "labels")) {
		t.Errorf("Service %s selects no Deployment of kubernetes/", rhost)
	} else if containerPort(get(rdep, "spec", "template", "spec", "containers", 0), get(rsvc, "spec", "ports", 0, "targetPort")) != 6379 {
		t.Errorf("Service %s: targetPort is not Redis' 6379", rhost)
	}

	// The Service: floodgate's pods, both ports.
	svc := objs["Service/floodgate"]
	if svc == nil || !selects(get(svc, "spec", "selector"), get(pod, "metadata", "labels")) {
		t.Fatal("no Service floodgate selecting the Deployment's pods")
	}
	want := map[int]bool{8080: true, 8081: true}
	for _, p := range list(get(svc, "spec", "ports")) {
		delete(want, containerPort(c, get(p, "targetPort")))
	}
	if len(want) > 0 {
		t.Errorf("Service floodgate does not reach container ports %v", want)
	}

	// Run it: the ConfigMap's files, the Deployment's arguments, in memory.
	dir := t.TempDir()
	for name, data := range get(cm, "data").(map[string]any) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(str(data)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	configCheck(t, dir)
	httpAddr, grpcAddr := freeAddr(t), freeAddr(t)
	var run []string
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "--config"):
			a = "--config=" + dir
		case strings.HasPrefix(a, "--redis"):
			continue // the memory backend
		}
		run = append(run, a)
	}
	run = append(run, "--http-addr="+httpAddr, "--grpc-addr="+grpcAddr)
	bin := staticBinary(t)
	cmd := exec.Command(bin, append([]string{"serve"}, run...)...)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("floodgate serve %q:\n%s", run, logs.String())
		}
	}()
	for probe, p := range probes {
		url := "http://" + httpAddr + p
		deadline := time.Now().Add(10 * time.Second)
		for {
			var last string
			resp, err := httpClient.Get(url)
			if err != nil {
				last = err.Error()
			} else {
				resp.Body.Close()
				last = resp.Status
				if resp.StatusCode == http.StatusOK {
					break
				}
				if resp.StatusCode == http.StatusNotFound {
					t.Errorf("%s: GET %s: %s: floodgate serves no such endpoint", probe, url, last)
					break
				}
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: GET %s: %s", probe, url, last)
				break
			}
			select {
			case err := <-done:
				t.Fatalf("floodgate serve exited: %v", err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

var httpClient = http.Client{Timeout: 2 * time.Second}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
