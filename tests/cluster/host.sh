#!/bin/bash
# PID 1 of one test cluster host (see tests/cluster/sandbox.py): its own network namespace (the
# address the cluster file lists), PID namespace (so `ray stop` here sees only this host's
# processes), mount namespace and hostname. It mounts the host's own home, the shared folder, a
# private /tmp (Ray's session files) and /run, then runs sshd until the sandbox ends.
#   host.sh NAME ADDRESS
set -euo pipefail
name=$1 address=$2
work=/run/agensh/work
hostname "$name"
mount -t tmpfs -o mode=755 tmpfs /home
mkdir /home/agensh
mount --bind "$work/hosts/$name/home" /home/agensh
mount -t tmpfs -o mode=755 tmpfs /mnt
mkdir /mnt/agensh
mount --bind "$work/shared" /mnt/agensh
mount -t tmpfs -o mode=1777 tmpfs /tmp
mkdir -m 700 /tmp/sshd
cp "$work/hosts/$name/sshd/"* /tmp/sshd/
mount -t tmpfs -o mode=755 tmpfs /run
mkdir -m 755 /run/sshd
cat >/tmp/sshd/sshd_config <<EOF
ListenAddress $address
HostKey /tmp/sshd/host_ed25519
PidFile none
UsePAM no
AllowUsers agensh
PermitRootLogin no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
AuthorizedKeysFile .ssh/authorized_keys
MaxStartups 64
MaxSessions 64
EOF
# The hosts trust what this machine trusts: the CA-bundle variables of the test's environment
# (a machine whose TLS goes through a proxy with its own CA sets them) reach every ssh session.
for v in NODE_EXTRA_CA_CERTS SSL_CERT_FILE SSL_CERT_DIR REQUESTS_CA_BUNDLE PIP_CERT; do
  if [ -n "${!v:-}" ]; then echo "SetEnv $v=${!v}" >>/tmp/sshd/sshd_config; fi
done
/usr/sbin/sshd -D -e -f /tmp/sshd/sshd_config &
# Wait for sshd; meanwhile bash, as PID 1, reaps the Ray processes that `ray start` leaves behind.
wait
