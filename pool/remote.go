package pool

// Remote is an agent started elsewhere (Config.Remote): its process as
// the pool sees it, what serves its files and terminals where its
// workspace is, its working directory there, and the name of the agent
// host that runs it.
type Remote struct {
	Proc  Proc
	Host  AgentHost
	Dir   string
	Where string
}
