package netproxy

// Listen is where the forwarder listens inside the sandbox unless told
// otherwise: the sandbox's own loopback.
const Listen = "127.0.0.1:3128"

// ForwardArgs are the arguments that run program (one that imports
// netproxy, such as the broker itself) as the forwarder listening on
// listen and relaying to socket, with command as its child.
func ForwardArgs(program, socket, listen string, command ...string) []string {
	return append([]string{program, ForwardArg, "--socket", socket, "--listen", listen, "--"}, command...)
}

// Env is the environment (NAME=value) that tells an agent to use the
// forwarder on listen as its proxy for every scheme, in upper and lower
// case as tools differ, to reach its own loopback directly, and (Node.js)
// to honour these.
func Env(listen string) []string {
	url := "http://" + listen
	const noProxy = "localhost,127.0.0.1,::1"
	return []string{
		"HTTPS_PROXY=" + url, "https_proxy=" + url,
		"HTTP_PROXY=" + url, "http_proxy=" + url,
		"ALL_PROXY=" + url, "all_proxy=" + url,
		"NO_PROXY=" + noProxy, "no_proxy=" + noProxy,
		"NODE_USE_ENV_PROXY=1",
	}
}
