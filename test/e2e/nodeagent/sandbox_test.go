package nodeagent

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// The container's user as setpriv (this machine's root) and as chroot (an image's
// root, where no setpriv is) take it: the same user, groups and no_new_privs.
func TestCredentials(t *testing.T) {
	chart := corev1.Container{SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](65534),
		RunAsNonRoot: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false)}}
	for _, tt := range []struct {
		name             string
		pod              corev1.Pod
		c                corev1.Container
		setpriv, chroot  string
		wantErrSubstring string
	}{
		{name: "the chart's", c: chart,
			setpriv: "/usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups --no-new-privs --pdeathsig=KILL",
			chroot:  "/usr/bin/setpriv --no-new-privs /usr/sbin/chroot --userspec=65534:65534 --groups=65534"},
		{name: "group and fsGroup", c: corev1.Container{SecurityContext: &corev1.SecurityContext{RunAsGroup: ptr.To[int64](3000)}},
			pod:     corev1.Pod{Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), FSGroup: ptr.To[int64](2000)}}},
			setpriv: "/usr/bin/setpriv --reuid=1000 --regid=3000 --groups=2000 --pdeathsig=KILL",
			chroot:  "/usr/sbin/chroot --userspec=1000:3000 --groups=2000"},
		{name: "root", c: corev1.Container{}, setpriv: "", chroot: "/usr/sbin/chroot"},
		{name: "runAsNonRoot without a user", c: corev1.Container{SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)}},
			wantErrSubstring: "runAsNonRoot without a runAsUser"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sp, err1 := credentials(&tt.pod, tt.c)
			ch, err2 := chrootCredentials(&tt.pod, tt.c)
			if tt.wantErrSubstring != "" {
				if err1 == nil || err2 == nil || !strings.Contains(err1.Error(), tt.wantErrSubstring) || !strings.Contains(err2.Error(), tt.wantErrSubstring) {
					t.Errorf("errors %v, %v; want both to say %q", err1, err2, tt.wantErrSubstring)
				}
				return
			}
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if got := strings.Join(sp, " "); got != tt.setpriv {
				t.Errorf("setpriv: %q, want %q", got, tt.setpriv)
			}
			if got := strings.Join(ch, " "); got != tt.chroot {
				t.Errorf("chroot: %q, want %q", got, tt.chroot)
			}
		})
	}
}
