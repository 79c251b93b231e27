package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/controlplane"
)

// An InCluster pod runs the way a container runtime would start it, as far as a
// program that talks to the API server can tell, without a container engine:
//
//   - A private mount namespace (unshare(1), which needs root) with a tmpfs over /run,
//     and each of the container's volumeMounts bind-mounted at its mountPath from a
//     per-pod directory (read-only when the mount says so): emptyDir volumes empty
//     (mode 0777), configMap, secret and projected volumes filled as the kubelet fills
//     them. The projected volume the ServiceAccount admission plugin adds
//     (kube-api-access-*) so gets a TokenRequest token for the pod's
//     serviceAccountName, bound to the pod, the kube-root-ca.crt ConfigMap's ca.crt and
//     the namespace, at /var/run/secrets/kubernetes.io/serviceaccount, where
//     rest.InClusterConfig reads them. A mountPath this machine lacks
//     (/etc/saturation-adapter/tls) is made in an overlay of its top-level directory
//     whose upper layer is in the private /run. Nothing outside the namespace sees
//     these mounts or directories.
//   - KUBERNETES_SERVICE_HOST/PORT name the API server (Options.APIServer), and the
//     container's env (values and the downward-API fields a kubelet resolves) is the
//     whole environment, with a PATH as images set.
//   - The container's user, group and fsGroup (runAsUser, runAsGroup, fsGroup;
//     allowPrivilegeEscalation false sets no_new_privs) through setpriv(1).
//
//   - With Engine.RootFS (an image's unpacked filesystem), the container's root is an
//     overlay of it (upper layer in the private /run) with /proc, /dev, /etc/hosts and
//     /etc/resolv.conf as a runtime provides them and the volumes mounted inside;
//     read-only when readOnlyRootFilesystem is set; and the binary runs chrooted there
//     (chroot --userspec, since setpriv is not in the image; the change of user clears
//     the parent-death signal, so such a process outlives a test that dies without its
//     cleanup). Without RootFS the container sees this machine's root.
//
// Not emulated: the network namespace (the pod binds its 127.x IP: pass
// --bind-address=$(POD_IP) in Engine.Args), resource limits, token rotation (the token
// lives an hour or its projection's expirationSeconds), subPath mounts, and without
// RootFS the image's own files and command (Binary stands for it).

// podPATH is the PATH of the pod's environment (distroless images set this one).
const podPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// sandboxScript sets up the mounts and execs the rest of its arguments. $1 is the pod
// directory, $2 the binary; they are bind-mounted first under the private /run, so
// that a volume mounted over their paths (an emptyDir at /tmp over a test's TempDir)
// does not hide them.
const sandboxScript = `set -e
mount -t tmpfs -o mode=755 tmpfs /run
mkdir /run/.pod-volumes && touch /run/.pod-binary
mount --bind "$1" /run/.pod-volumes
mount --bind "$2" /run/.pod-binary
shift 2
`

// podMount is one volumeMount: the volume's directory under the pod directory and
// where it is mounted.
type podMount struct {
	volume, path string
	readOnly     bool
}

// startInCluster starts eng's binary with args as the pod's container c (see above).
func (a *Agent) startInCluster(ctx context.Context, r *podRun, pod *corev1.Pod, c corev1.Container, eng Engine, args []string) (*controlplane.Process, error) {
	if a.o.APIServer == "" {
		return nil, fmt.Errorf("image %s runs in-cluster, but the agent has no Options.APIServer", c.Image)
	}
	host, port, ok := strings.Cut(a.o.APIServer, ":")
	if !ok {
		return nil, fmt.Errorf("Options.APIServer %q: want host:port", a.o.APIServer)
	}
	dir := filepath.Join(a.o.LogDir, pod.Name+".volumes")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	mounts, err := a.volumes(ctx, r, pod, c, dir)
	if err != nil {
		return nil, fmt.Errorf("pod %s: volumes: %w", pod.Name, err)
	}
	env, err := a.podEnv(r, pod, c, host, port)
	if err != nil {
		return nil, err
	}
	// The script gets the volumes' directory and the binary (or the root
	// filesystem) as $1 and $2, and execs the rest: run, then its arguments.
	var script, second string
	var run []string
	if eng.RootFS != "" {
		script, run, err = rootFSSandbox(pod, c, eng, mounts)
		second = eng.RootFS
	} else {
		script, run, err = hostSandbox(pod, c, mounts)
		second = eng.Binary
	}
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", pod.Name, err)
	}
	cmd := []string{"--mount", "--propagation", "private", "/usr/bin/env", "-i"}
	cmd = append(cmd, env...)
	cmd = append(cmd, "/bin/sh", "-c", script, "pod-sandbox", dir, second)
	cmd = append(cmd, run...)
	cmd = append(cmd, args...)
	return controlplane.StartProcess(a.o.LogDir, pod.Name, "/usr/bin/unshare", cmd, nil)
}

// hostSandbox returns the script that mounts the volumes over this machine's
// root, and the command that runs the binary there as the container's user.
func hostSandbox(pod *corev1.Pod, c corev1.Container, mounts []podMount) (string, []string, error) {
	user, err := credentials(pod, c)
	if err != nil {
		return "", nil, err
	}
	script := sandboxScript
	overlays, err := overlayDirs(mounts)
	if err != nil {
		return "", nil, err
	}
	for _, d := range overlays {
		q, w := shellQuote(d), shellQuote("/run/.pod-overlay"+d)
		script += "mkdir -p " + w + "/upper " + w + "/work\nmount -t overlay overlay -o lowerdir=" + q +
			",upperdir=" + w + "/upper,workdir=" + w + "/work " + q + "\n"
	}
	script += bindVolumes("", mounts) + "cd /\nexec \"$@\"\n"
	return script, append(user, "/run/.pod-binary"), nil
}

// rootFSSandbox returns the script that builds the container's root from
// eng.RootFS (see above), and the command that runs eng.Binary chrooted there
// as the container's user.
func rootFSSandbox(pod *corev1.Pod, c corev1.Container, eng Engine, mounts []podMount) (string, []string, error) {
	if !path.IsAbs(eng.Binary) || strings.ContainsAny(eng.Binary, "'\n") {
		return "", nil, fmt.Errorf("image %s: entrypoint %q: want an absolute path inside its root filesystem", c.Image, eng.Binary)
	}
	user, err := chrootCredentials(pod, c)
	if err != nil {
		return "", nil, err
	}
	const root = "/run/.pod-root"
	script := `set -e
mount -t tmpfs -o mode=755 tmpfs /run
mkdir -p /run/.pod-volumes /run/.pod-rootfs/upper /run/.pod-rootfs/work ` + root + `
mount --bind "$1" /run/.pod-volumes
mount -t overlay overlay -o lowerdir="$2",upperdir=/run/.pod-rootfs/upper,workdir=/run/.pod-rootfs/work ` + root + `
mkdir -p ` + root + `/proc ` + root + `/dev ` + root + `/etc
mount -t proc proc ` + root + `/proc
mount --rbind /dev ` + root + `/dev
for f in hosts resolv.conf; do touch ` + root + `/etc/$f; mount --bind /etc/$f ` + root + `/etc/$f; mount -o remount,bind,ro ` + root + `/etc/$f; done
shift 2
` + bindVolumes(root, mounts)
	if sc := c.SecurityContext; sc != nil && ptr.Deref(sc.ReadOnlyRootFilesystem, false) {
		script += "mount -o remount,bind,ro " + root + "\n"
	}
	script += "exec \"$@\"\n"
	return script, append(user, root, eng.Binary), nil
}

// bindVolumes returns the script lines that bind each volume's directory at
// its mountPath under root ("" for /), read-only where the mount says so.
func bindVolumes(root string, mounts []podMount) string {
	var b strings.Builder
	for _, m := range mounts {
		q := shellQuote(root + m.path)
		b.WriteString("mkdir -p " + q + "\nmount --bind /run/.pod-volumes/" + m.volume + " " + q + "\n")
		if m.readOnly {
			b.WriteString("mount -o remount,bind,ro " + q + "\n")
		}
	}
	return b.String()
}

// podEnv returns the container's whole environment.
func (a *Agent) podEnv(r *podRun, pod *corev1.Pod, c corev1.Container, host, port string) ([]string, error) {
	env := []string{"PATH=" + podPATH, "HOSTNAME=" + pod.Name, "KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port}
	for _, e := range c.Env {
		v, err := a.envValue(r, pod, e)
		if err != nil {
			return nil, fmt.Errorf("pod %s: env %s: %w", pod.Name, e.Name, err)
		}
		env = append(env, e.Name+"="+v)
	}
	if len(c.EnvFrom) > 0 {
		return nil, fmt.Errorf("pod %s: envFrom is not supported by the node agent", pod.Name)
	}
	return env, nil
}

// podUser is who a container runs as: its user and group, fsGroup (a supplementary
// group, when set) and no_new_privs (allowPrivilegeEscalation false).
type podUser struct {
	uid, gid string
	fsGroup  string
	nnp      bool
}

// userOf returns who c runs as; nil when it runs as root.
func userOf(pod *corev1.Pod, c corev1.Container) (*podUser, error) {
	var uid, gid, fsGroup *int64
	nnp := false
	if psc := pod.Spec.SecurityContext; psc != nil {
		uid, gid, fsGroup = psc.RunAsUser, psc.RunAsGroup, psc.FSGroup
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			uid = sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			gid = sc.RunAsGroup
		}
		nnp = sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation
	}
	if uid == nil || *uid == 0 {
		if nonRoot(pod, c) {
			return nil, fmt.Errorf("runAsNonRoot without a runAsUser: the node agent has no image user to check")
		}
		return nil, nil
	}
	u := &podUser{uid: strconv.FormatInt(*uid, 10), gid: strconv.FormatInt(*uid, 10), nnp: nnp}
	if gid != nil {
		u.gid = strconv.FormatInt(*gid, 10)
	}
	if fsGroup != nil {
		u.fsGroup = strconv.FormatInt(*fsGroup, 10)
	}
	return u, nil
}

// credentials returns the setpriv(1) command that runs the rest as the container's
// user, or nothing when it runs as root.
func credentials(pod *corev1.Pod, c corev1.Container) ([]string, error) {
	u, err := userOf(pod, c)
	if u == nil {
		return nil, err
	}
	out := []string{"/usr/bin/setpriv", "--reuid=" + u.uid, "--regid=" + u.gid}
	if u.fsGroup != "" {
		out = append(out, "--groups="+u.fsGroup)
	} else {
		out = append(out, "--clear-groups")
	}
	if u.nnp {
		out = append(out, "--no-new-privs")
	}
	// A change of credentials clears the parent-death signal StartProcess set.
	return append(out, "--pdeathsig=KILL"), nil
}

// chrootCredentials returns the command that chroots into its first argument and runs
// the rest there as the container's user: setpriv for no_new_privs alone (it stays
// root), then chroot(8), which changes the user after chroot(2) (setpriv is not in the
// image to do it there).
func chrootCredentials(pod *corev1.Pod, c corev1.Container) ([]string, error) {
	u, err := userOf(pod, c)
	if u == nil {
		return []string{"/usr/sbin/chroot"}, err
	}
	var out []string
	if u.nnp {
		out = []string{"/usr/bin/setpriv", "--no-new-privs"}
	}
	// chroot's --groups lists the supplementary groups; the primary one alone is
	// none beyond it (setpriv's --clear-groups).
	groups := u.gid
	if u.fsGroup != "" {
		groups = u.fsGroup
	}
	return append(out, "/usr/sbin/chroot", "--userspec="+u.uid+":"+u.gid, "--groups="+groups), nil
}

func nonRoot(pod *corev1.Pod, c corev1.Container) bool {
	if c.SecurityContext != nil && c.SecurityContext.RunAsNonRoot != nil {
		return *c.SecurityContext.RunAsNonRoot
	}
	return pod.Spec.SecurityContext != nil && ptr.Deref(pod.Spec.SecurityContext.RunAsNonRoot, false)
}

// volumes fills a directory per volume the container mounts and returns the mounts,
// parents before children.
func (a *Agent) volumes(ctx context.Context, r *podRun, pod *corev1.Pod, c corev1.Container, dir string) ([]podMount, error) {
	var fsGroup *int64
	if pod.Spec.SecurityContext != nil {
		fsGroup = pod.Spec.SecurityContext.FSGroup
	}
	var mounts []podMount
	for _, vm := range c.VolumeMounts {
		if vm.SubPath != "" || vm.SubPathExpr != "" {
			return nil, fmt.Errorf("volumeMount %s: subPath is not supported by the node agent", vm.Name)
		}
		p := vm.MountPath
		if !path.IsAbs(p) || path.Clean(p) != p || strings.ContainsAny(p, "'\n") {
			return nil, fmt.Errorf("volumeMount %s: mountPath %q: want a clean absolute path", vm.Name, p)
		}
		i := slices.IndexFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name })
		if i < 0 {
			return nil, fmt.Errorf("volumeMount %s: no such volume", vm.Name)
		}
		v := pod.Spec.Volumes[i]
		vdir := filepath.Join(dir, v.Name)
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return nil, err
		}
		var files map[string][]byte
		mode := os.FileMode(0o644)
		var err error
		switch {
		case v.EmptyDir != nil:
			err = os.Chmod(vdir, 0o777)
		case v.Projected != nil:
			mode = fileMode(v.Projected.DefaultMode)
			files, err = a.projected(ctx, r, pod, v.Projected.Sources)
		case v.ConfigMap != nil:
			mode = fileMode(v.ConfigMap.DefaultMode)
			files, err = a.configMapFiles(ctx, pod.Namespace, v.ConfigMap.Name, v.ConfigMap.Items)
		case v.Secret != nil:
			mode = fileMode(v.Secret.DefaultMode)
			files, err = a.secretFiles(ctx, pod.Namespace, v.Secret.SecretName, v.Secret.Items)
		default:
			err = fmt.Errorf("volume %s: only emptyDir, configMap, secret and projected volumes are supported by the node agent", v.Name)
		}
		if err != nil {
			return nil, err
		}
		if err := writeFiles(vdir, files, mode, fsGroup); err != nil {
			return nil, err
		}
		mounts = append(mounts, podMount{volume: v.Name, path: p, readOnly: vm.ReadOnly})
	}
	slices.SortStableFunc(mounts, func(x, y podMount) int { return len(x.path) - len(y.path) })
	return mounts, nil
}

// overlayDirs returns the top-level directories (/etc) that need an overlay in the
// pod's mount namespace because a mountPath under them does not exist on this machine
// (/etc/saturation-adapter/tls): the overlay's upper layer lives in the private /run,
// so mkdir there never changes this machine's own filesystem. Paths under /run are
// made in the private /run itself.
func overlayDirs(mounts []podMount) ([]string, error) {
	var out []string
	for _, m := range mounts {
		if _, err := os.Stat(m.path); err == nil || underRun(m.path) {
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(m.path, "/"), "/")
		top := "/" + first
		if st, err := os.Stat(top); err != nil || !st.IsDir() || top == m.path {
			return nil, fmt.Errorf("mountPath %s: neither it nor %s exists on this machine", m.path, top)
		}
		if !slices.Contains(out, top) {
			out = append(out, top)
		}
	}
	return out, nil
}

func underRun(p string) bool {
	return strings.HasPrefix(p, "/run/") || strings.HasPrefix(p, "/var/run/")
}

func fileMode(m *int32) os.FileMode {
	if m == nil {
		return 0o644
	}
	return os.FileMode(*m) & 0o777
}

// writeFiles writes files (relative paths) under dir with mode, group fsGroup when set.
func writeFiles(dir string, files map[string][]byte, mode os.FileMode, fsGroup *int64) error {
	for name, data := range files {
		if !filepath.IsLocal(name) {
			return fmt.Errorf("volume file %q: want a relative path inside the volume", name)
		}
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, mode); err != nil {
			return err
		}
		if err := os.Chmod(p, mode); err != nil { // WriteFile's mode passes the umask
			return err
		}
		if fsGroup != nil {
			if err := os.Chown(p, 0, int(*fsGroup)); err != nil {
				return err
			}
		}
	}
	return nil
}

// projected fills a projected volume from its sources.
func (a *Agent) projected(ctx context.Context, r *podRun, pod *corev1.Pod, sources []corev1.VolumeProjection) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, src := range sources {
		var files map[string][]byte
		var err error
		switch {
		case src.ServiceAccountToken != nil:
			var tok string
			tok, err = a.token(ctx, pod, src.ServiceAccountToken)
			files = map[string][]byte{src.ServiceAccountToken.Path: []byte(tok)}
		case src.ConfigMap != nil:
			files, err = a.configMapFiles(ctx, pod.Namespace, src.ConfigMap.Name, src.ConfigMap.Items)
		case src.Secret != nil:
			files, err = a.secretFiles(ctx, pod.Namespace, src.Secret.Name, src.Secret.Items)
		case src.DownwardAPI != nil:
			files = map[string][]byte{}
			for _, item := range src.DownwardAPI.Items {
				if item.FieldRef == nil {
					return nil, fmt.Errorf("downwardAPI %s: only fieldRef is supported by the node agent", item.Path)
				}
				var v string
				if v, err = a.fieldValue(r, pod, item.FieldRef.FieldPath); err != nil {
					break
				}
				files[item.Path] = []byte(v)
			}
		default:
			err = fmt.Errorf("a projected source other than serviceAccountToken, configMap, secret and downwardAPI")
		}
		if err != nil {
			return nil, err
		}
		for k, v := range files {
			out[k] = v
		}
	}
	return out, nil
}

// token requests a token for the pod's ServiceAccount, bound to the pod, as the
// kubelet does for a serviceAccountToken projection.
func (a *Agent) token(ctx context.Context, pod *corev1.Pod, p *corev1.ServiceAccountTokenProjection) (string, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	spec := authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(ptr.Deref(p.ExpirationSeconds, 3600)),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}
	if p.Audience != "" {
		spec.Audiences = []string{p.Audience}
	}
	tr, err := a.o.Client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for ServiceAccount %s/%s: %w", pod.Namespace, sa, err)
	}
	return tr.Status.Token, nil
}

// volumeSourceWait is how long a missing ConfigMap or Secret is waited for, as the
// kubelet retries a mount (kube-root-ca.crt appears once the controller publishes it).
const volumeSourceWait = 60 * time.Second

func (a *Agent) configMapFiles(ctx context.Context, ns, name string, items []corev1.KeyToPath) (map[string][]byte, error) {
	var data map[string][]byte
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, volumeSourceWait, true, func(ctx context.Context) (bool, error) {
		cm, err := a.o.Client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		data = map[string][]byte{}
		for k, v := range cm.Data {
			data[k] = []byte(v)
		}
		for k, v := range cm.BinaryData {
			data[k] = v
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s/%s: %w", ns, name, err)
	}
	return pick(data, items, "ConfigMap "+ns+"/"+name)
}

func (a *Agent) secretFiles(ctx context.Context, ns, name string, items []corev1.KeyToPath) (map[string][]byte, error) {
	var data map[string][]byte
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, volumeSourceWait, true, func(ctx context.Context) (bool, error) {
		s, err := a.o.Client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		data = s.Data
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s: %w", ns, name, err)
	}
	return pick(data, items, "Secret "+ns+"/"+name)
}

// pick returns every key as a file, or only items (key → path).
func pick(data map[string][]byte, items []corev1.KeyToPath, what string) (map[string][]byte, error) {
	if len(items) == 0 {
		return data, nil
	}
	out := map[string][]byte{}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			return nil, fmt.Errorf("%s has no key %s", what, it.Key)
		}
		out[it.Path] = v
	}
	return out, nil
}

// envValue resolves one env entry: a value, or a downward-API field.
func (a *Agent) envValue(r *podRun, pod *corev1.Pod, e corev1.EnvVar) (string, error) {
	if e.ValueFrom == nil {
		return e.Value, nil
	}
	if e.ValueFrom.FieldRef == nil {
		return "", fmt.Errorf("only value and valueFrom.fieldRef are supported by the node agent")
	}
	return a.fieldValue(r, pod, e.ValueFrom.FieldRef.FieldPath)
}

// fieldValue is a downward-API field of the pod.
func (a *Agent) fieldValue(r *podRun, pod *corev1.Pod, field string) (string, error) {
	switch field {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "spec.nodeName":
		return a.o.NodeName, nil
	case "status.hostIP":
		return "127.0.0.1", nil
	case "status.podIP":
		return r.ip, nil
	}
	return "", fmt.Errorf("field %s is not supported by the node agent", field)
}

// shellQuote quotes s for sh (s holds no single quote: volumes checks).
func shellQuote(s string) string { return "'" + s + "'" }
