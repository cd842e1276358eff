#!/usr/bin/env bash
# Follows the "Install on Debian or Ubuntu" section of docs/operating.md on a fresh Debian VM and checks the result.
#
# Boots a throw-away Debian (default: 13, trixie) in qemu (KVM, or software emulation where KVM cannot run it),
# runs the section's `sh` blocks in order as root (the commands as written, with only the substitutions listed at
# `readme_steps` below), then checks the service the way an operator would: readiness, an upload and its
# download, a body over 1e9 bytes, SIGHUP, a crash and its restart, a graceful stop that leaves no temp parts,
# and a reboot that brings it back.
#
#   sudo systemd/check-install.sh            # needs root, network to Debian's mirror and to npm
#   SUITE=bookworm systemd/check-install.sh  # Debian 12: Node from NodeSource, as docs/operating.md says, or from
#                                            # NODE_TARBALL=<node-v22…-linux-x64.tar.xz> where NodeSource is out of reach
#
# Not part of `npm test`: it takes 5–30 minutes with KVM, about 35 under software emulation (TCG). Host tools it
# installs if missing: qemu-system-x86, debootstrap, e2fsprogs, openssh-client. Work files go to $WORK (default
# /var/tmp/sluice-vm); the base image is kept there and reused, every run boots a fresh copy of it. On a failure the service's status and journal are
# printed; with KEEP=1 the VM is left running for a look inside.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=${WORK:-/var/tmp/sluice-vm}
SUITE=${SUITE:-trixie}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SSH_PORT=${SSH_PORT:-2222}
BASE="$WORK/base-$SUITE.img"
DISK="$WORK/run-$SUITE.img"
ROOT="$WORK/root-$SUITE"

log() { printf '\n== %s\n' "$*" >&2; }
die() { printf 'check-install: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (debootstrap and mkfs need it)"
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
command -v ssh >/dev/null || need+=(openssh-client)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >/dev/null
fi
mkdir -p "$WORK"

# ---- the base image: a plain Debian with a kernel, systemd, DHCP networking and sshd -----------------------------
if [ ! -f "$BASE" ]; then
  log "debootstrap $SUITE into $ROOT"
  rm -rf "$ROOT"
  debootstrap --include=linux-image-amd64,systemd-sysv,openssh-server,ca-certificates "$SUITE" "$ROOT" "$MIRROR" >/dev/null
  echo sluice-vm >"$ROOT/etc/hostname"
  echo '/dev/vda / ext4 defaults 0 1' >"$ROOT/etc/fstab"
  printf '[Match]\nName=en*\n[Network]\nDHCP=yes\n' >"$ROOT/etc/systemd/network/20-wired.network"
  rm -f "$ROOT/etc/resolv.conf" && echo 'nameserver 10.0.2.3' >"$ROOT/etc/resolv.conf"
  chroot "$ROOT" systemctl enable systemd-networkd ssh >/dev/null 2>&1
  # This machine reaches the internet through a TLS-inspecting egress proxy: the VM trusts the host's extra CAs.
  if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$ROOT/usr/local/share/ca-certificates/"
    chroot "$ROOT" update-ca-certificates >/dev/null 2>&1
    echo 'NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt' >>"$ROOT/etc/environment"
  fi
  [ -f "$WORK/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$WORK/id_ed25519"
  install -d -m 0700 "$ROOT/root/.ssh"
  install -m 0600 "$WORK/id_ed25519.pub" "$ROOT/root/.ssh/authorized_keys"
  cp "$ROOT"/boot/vmlinuz-* "$WORK/vmlinuz-$SUITE"
  cp "$ROOT"/boot/initrd.img-* "$WORK/initrd-$SUITE"
  log "making $BASE"
  mkfs.ext4 -q -F -L root -d "$ROOT" "$BASE" 12G
  rm -rf "$ROOT"
fi
cp --sparse=always "$BASE" "$DISK"

# ---- boot ------------------------------------------------------------------------------------------------------
QEMU_PID=
cleanup() {
  local status=$?
  if [ "$status" != 0 ] && [ -n "$QEMU_PID" ] && vm true 2>/dev/null; then
    log "failed; the service as the VM saw it"
    vm 'systemctl status sluice --no-pager -l; journalctl -u sluice -n 30 --no-pager -o cat; dmesg | grep -iE "audit|seccomp" | tail -5' || true
    if [ -n "${KEEP:-}" ]; then
      log "KEEP is set: the VM stays up (pid $QEMU_PID): ssh -p $SSH_PORT -i $WORK/id_ed25519 root@127.0.0.1"
      return
    fi
  fi
  [ -n "$QEMU_PID" ] && kill "$QEMU_PID" 2>/dev/null
  rm -f "$DISK"
}
trap cleanup EXIT
# KVM where it works, else software emulation (TCG: ~40 s to boot, everything 5–20× slower, still fine here).
# Some hosts offer a /dev/kvm that cannot run a stock kernel (nested "kvm-pvm": "KVM internal error"): the
# first boot then dies at once, or halts with that error on its console, and the run goes on under TCG.
ACCEL=${ACCEL:-$([ -c /dev/kvm ] && echo kvm || echo tcg)}
boot() {
  local cpu=host
  [ "$ACCEL" = tcg ] && cpu=max
  qemu-system-x86_64 -accel "$ACCEL" -cpu "$cpu" -smp 2 -m 4096 -nographic -no-reboot \
    -kernel "$WORK/vmlinuz-$SUITE" -initrd "$WORK/initrd-$SUITE" -append 'root=/dev/vda rw console=ttyS0 quiet' \
    -drive "file=$DISK,format=raw,if=virtio" -nic "user,model=virtio-net-pci,hostfwd=tcp:127.0.0.1:$SSH_PORT-:22" \
    >"$WORK/console-$SUITE.log" 2>&1 &
  QEMU_PID=$!
  for _ in $(seq 1 300); do
    if vm true 2>/dev/null; then return 0; fi
    # On some hosts qemu does not exit on that error but halts the guest and waits: stop it and go on as if it had.
    if [ "$ACCEL" = kvm ] && grep -aq 'KVM internal error' "$WORK/console-$SUITE.log" 2>/dev/null; then
      kill "$QEMU_PID" 2>/dev/null || true
      wait "$QEMU_PID" 2>/dev/null || true
    fi
    if ! kill -0 "$QEMU_PID" 2>/dev/null; then
      if [ "$ACCEL" = kvm ]; then
        log "KVM cannot run this guest (see $WORK/console-$SUITE.log): software emulation instead"
        ACCEL=tcg
        boot
        return
      fi
      die "the VM stopped while booting (see $WORK/console-$SUITE.log)"
    fi
    sleep 1
  done
  die "no ssh after 300 s (see $WORK/console-$SUITE.log)"
}
vm() {
  ssh -q -p "$SSH_PORT" -i "$WORK/id_ed25519" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
    -o ConnectTimeout=5 -o BatchMode=yes root@127.0.0.1 "$@"
}
log "booting $SUITE"
boot
vm 'grep -h PRETTY_NAME /etc/os-release; uname -r; ldd --version | head -1'

# ---- the install steps -----------------------------------------------------------------------------------------------
# The `sh` blocks of "## Install on Debian or Ubuntu" in docs/operating.md, in order. Substitutions, and why:
#   - the repository URL: a git bundle of this checkout's HEAD, copied into the VM;
#   - of the Node lines, the one for this release runs: Debian's own on 13, NodeSource's 20 on 12 and Ubuntu 22.04
#     (glibc below 2.38), NodeSource's 22 on Ubuntu 24.04; with
#     NODE_TARBALL neither does, and that Node is unpacked into /usr instead;
#   - `journalctl -f` follows forever: the last lines are printed instead;
#   - step 7a's nginx block needs a certificate for a real name, so it is not run.
readme_steps() {
  # From HEAD, like the code in the bundle: uncommitted edits are not what a clone would get.
  git -C "$REPO" show HEAD:docs/operating.md |
    awk '/^## Install on Debian or Ubuntu/{on=1; next} on && /^## /{exit}
       on && /^```sh$/{inblock=1; print "# ---- block " ++n; next} inblock && /^```$/{inblock=0; next}
       inblock{print}' |
    awk -v node="$1" -v want="$2" '
      /deb\.nodesource\.com/ && (node != "nodesource" || index($0, want) == 0) { print "# (NodeSource: not this run)"; next }
      /apt-get install -y nodejs npm/ && node != "debian" { print "# (Debian'"'"'s Node: not this run)"; next }
      /apt-get install -y nginx/ { print "# (nginx: not run)"; next }
      { gsub(/<repository URL>/, "/root/sluice.bundle"); sub(/journalctl -u sluice -f/, "journalctl -u sluice -n 20 --no-pager"); print }'
}
git -C "$REPO" bundle create "$WORK/sluice.bundle" HEAD >/dev/null 2>&1
vm 'cat >/root/sluice.bundle' <"$WORK/sluice.bundle"
if [ -n "${NODE_TARBALL:-}" ]; then
  vm 'tar -xJ -C /usr --strip-components=1 --exclude=CHANGELOG.md --exclude=README.md --exclude=LICENSE' <"$NODE_TARBALL"
  node=tarball
elif [ "$SUITE" = trixie ] || [ "$SUITE" = forky ]; then
  node=debian
else
  node=nodesource
fi
nodesource_line=setup_20.x
[ "$SUITE" = noble ] && nodesource_line=setup_22.x
readme_steps "$node" "$nodesource_line" >"$WORK/steps.sh"
grep -q 'systemctl daemon-reload && systemctl enable --now sluice' "$WORK/steps.sh" || die "install steps not found in docs/operating.md"
log "running the install steps of docs/operating.md (copied to $WORK/steps.sh)"
vm 'export DEBIAN_FRONTEND=noninteractive; set -a; . /etc/environment; set +a; cd /root && bash -euxo pipefail' <"$WORK/steps.sh"

# ---- checks ------------------------------------------------------------------------------------------------------
# Run inside the VM; each prints what it saw and fails the run on the first surprise.
log "checking the running service"
vm 'bash -euo pipefail' <<'CHECKS'
fail() { echo "FAIL: $*" >&2; journalctl -u sluice -n 40 --no-pager >&2; exit 1; }
ok() { echo "ok: $*"; }
base=http://127.0.0.1:8080
wait_ready() {
  for _ in $(seq 1 60); do curl -fsS "$base/readyz" >/dev/null 2>&1 && return 0; sleep 1; done
  fail "not ready after 60 s"
}
json() { node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const v=JSON.parse(s);console.log(eval(process.argv[1]))})' "$1"; }
parts() { find /var/lib/sluice/tmp -name '*.part' 2>/dev/null; }

[ "$(systemctl is-active sluice)" = active ] || fail "sluice is not active"
[ "$(systemctl show -p Type --value sluice)" = notify ] || fail "unit is not Type=notify"
[ "$(systemctl is-enabled sluice)" = enabled ] || fail "sluice is not enabled"
ready=$(curl -fsS "$base/readyz"); echo "$ready" | grep -q '"db":"ok"' && echo "$ready" | grep -q '"redis":"ok"' || fail "readyz: $ready"
ok "readyz $ready"
[ "$(curl -fsS "$base/healthz")" = '{"success":true}' ] || fail "healthz: $(curl -sS "$base/healthz")"
binding=$(echo "$ready" | json 'JSON.stringify(v.uws)'); ok "healthz; binding $binding"
user=$(ps -o user= -p "$(systemctl show -p MainPID --value sluice)"); [ "$user" = sluice ] || fail "runs as $user"
ok "runs as sluice; state dir $(stat -c '%U %a' /var/lib/sluice)"
journalctl -u sluice -o cat -n 50 --no-pager | grep '^{' | tail -1 | json 'typeof v.level' >/dev/null || fail "log lines are not JSON"
ok "JSON log lines in the journal"
curl -fsS "$base/metrics" | grep -q '^sluice_http_requests_total' || fail "no sluice_http_requests_total in /metrics"
ok "/metrics"

head -c 20000000 /dev/urandom >/root/small.bin
up=$(curl -fsS -F 'files[]=@/root/small.bin' "$base/api/v1/upload")
code=$(echo "$up" | json 'v.short_code ?? v.bundle?.short_code ?? v.code'); id=$(echo "$up" | json '(v.files ?? v.bundle.files)[0].id')
[ -n "$code" ] && [ "$code" != undefined ] || fail "upload reply: $up"
curl -fsS "$base/api/v1/download/$id" -o /root/small.out
cmp /root/small.bin /root/small.out || fail "download differs"
ok "20 MB upload and download, bundle $code"

# A body of 10 digits (>= 1e9 bytes) with Content-Length: some uWebSockets.js builds drop it; every system must take it.
head -c 1050000000 /dev/zero >/root/big.bin
big=$(curl -fsS -F 'files[]=@/root/big.bin' "$base/api/v1/upload"); rm -f /root/big.bin
echo "$big" | grep -q '"size":1050000000' || fail "1.05 GB upload: $big"
ok "1.05 GB upload with Content-Length"

systemctl kill -s HUP sluice; sleep 1
[ "$(systemctl is-active sluice)" = active ] || fail "SIGHUP stopped it"
journalctl -u sluice -o cat -n 20 --no-pager | grep -q 'SIGHUP' || fail "no SIGHUP log line"
ok "SIGHUP: still running, logged"

pid=$(systemctl show -p MainPID --value sluice); systemctl kill -s KILL sluice; sleep 4
[ "$(systemctl show -p MainPID --value sluice)" != "$pid" ] || fail "not restarted after SIGKILL"
wait_ready; ok "restarted after SIGKILL (Restart=on-failure)"

# A slow upload in flight, then a stop: it drains for the grace period, aborts the upload, removes its part, exits 0.
head -c 200000000 /dev/zero >/root/slow.bin
curl -sS --limit-rate 1M -F 'files[]=@/root/slow.bin' "$base/api/v1/upload" >/root/slow.out 2>&1 &
sleep 3
[ -n "$(parts)" ] || fail "no temp part on disk during the upload"
t0=$(date +%s); systemctl stop sluice; t1=$(date +%s)
wait || true
[ "$(systemctl show -p ExecMainStatus --value sluice)" = 0 ] || fail "exit status $(systemctl show -p ExecMainStatus --value sluice)"
[ "$(systemctl show -p Result --value sluice)" = success ] || fail "result $(systemctl show -p Result --value sluice)"
[ -z "$(parts)" ] || fail "temp parts left: $(parts)"
ok "stop with an upload in flight: $((t1 - t0)) s, exit 0, no temp parts"

systemctl start sluice; wait_ready
curl -fsS "$base/api/v1/download/$id" | cmp - /root/small.bin || fail "file lost across restart"
ok "started again; the file is still there"
CHECKS

log "rebooting"
vm 'systemctl reboot' || true
wait "$QEMU_PID" 2>/dev/null || true # -no-reboot: qemu exits at the guest's reboot
boot
vm 'bash -euo pipefail' <<'AFTER'
for _ in $(seq 1 60); do curl -fsS http://127.0.0.1:8080/readyz && break; sleep 1; done
[ "$(systemctl is-active sluice)" = active ]
echo; echo "ok: active after a reboot"
systemd-analyze verify /etc/systemd/system/sluice.service && echo "ok: systemd-analyze verify"
systemd-analyze security sluice --no-pager | tail -1
AFTER
log "all checks passed on $SUITE"
