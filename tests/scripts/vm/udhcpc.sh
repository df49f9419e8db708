#!/bin/busybox sh
# busybox udhcpc's event script in the lab HookOS: configures the lease's address (no route beyond the boot
# network: the boot server sends no router) and records it for /init.
case "$1" in
  deconfig)
    ip -4 addr flush dev "$interface"
    ;;
  bound | renew)
    ip -4 addr flush dev "$interface"
    ip -4 addr add "$ip/${mask:-24}" dev "$interface"
    {
      echo "LEASE_IP=$ip"
      echo "LEASE_SERVER=${serverid:-$siaddr}"
    } >/tmp/lease.env
    ;;
esac
exit 0
