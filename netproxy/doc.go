// Package netproxy is the sandboxed agents' only way out to the network:
// an HTTP proxy served on a Unix socket that lets an agent reach only the
// hosts its allow list names, and the forwarder that runs inside the
// sandbox and relays the agent's loopback proxy port to that socket.
//
// The agent runs in a network namespace of its own, where only its own
// loopback exists. The broker binds a Unix socket served by a Proxy
// (Proxy.Serve, one listener per agent) into the sandbox and starts the
// agent under the forwarder, which listens on the sandbox's 127.0.0.1:3128
// and relays each TCP connection to the socket (ForwardArgs). The agent is
// told to use http://127.0.0.1:3128 as its proxy (Env). The proxy takes CONNECT host:port
// (HTTPS, tunnelled) and absolute-form plain HTTP requests, checks the
// host and port as asked against the allow list, resolves the name itself
// and dials the address it checked: a name that resolves to a loopback,
// link-local, private or otherwise special address is refused unless an
// entry names that exact address and port.
//
// # The forwarder
//
// The forwarder is not a separate program. Any program that imports
// netproxy runs as the forwarder when its first argument is ForwardArg:
//
//	PROGRAM __acp-broker-net-forward --socket /PATH/proxy.sock --listen 127.0.0.1:3128 -- COMMAND ARGS...
//
// An init function of this package sees that argument, runs Forwarder
// with the arguments after it and exits with its status before main (or a
// test binary's TestMain) starts. So the broker's own binary is the
// forwarder inside the sandbox, and a test binary that imports netproxy
// can run itself as one.
package netproxy
