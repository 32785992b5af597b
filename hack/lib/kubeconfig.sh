# shellcheck shell=bash
# Kubeconfigs for the hack scripts' host processes that run as a ServiceAccount, the way their
# pods would in a cluster: RBAC alone decides what they may do.

# Writes <file>, a kubeconfig of the cluster <kubectl> talks to that authenticates as
# ServiceAccount <namespace>/<account> with a bound token, and prints its path.
service_account_kubeconfig_to() { # <kubectl> <namespace> <account> <file>
  local kubectl=$1 namespace=$2 account=$3 kc=$4 token server ca
  token=$("$kubectl" create token "$account" -n "$namespace" --duration=24h)
  server=$("$kubectl" config view --minify -o jsonpath='{.clusters[0].cluster.server}')
  ca=$("$kubectl" config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
  cat >"$kc" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "$server", certificate-authority-data: "$ca"}
users:
- name: $account
  user: {token: "$token"}
contexts:
- name: $account
  context: {cluster: local, user: $account, namespace: $namespace}
current-context: $account
KUBECONFIG
  echo "$kc"
}
