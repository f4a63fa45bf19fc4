// Package fakeagent is a scriptable ACP agent for the broker's tests and
// demo. It runs as a real subprocess (testdata/fakeagent) or on goroutines
// over pipes inside a test. The first word of each prompt picks how the
// turn behaves, as listed below.
//
// Durations are Go durations ("300ms"); every wait ends early when the
// agent stops, and where it says so, when the turn is cancelled.
//
//	stream N [D]       N chunks "chunk i\n", D apart; honours cancel
//	slow D [N]         the same with the delay first (default 100ms, 3)
//	burst N            N one-character chunks as fast as possible
//	code N             a fenced Go block of N lines, in small chunks
//	stamp N D          N chunks "t=<unix nanoseconds sent>", D apart
//	hang               one chunk, then nothing until session/cancel
//	hang-timed [D]     as hang; at session/cancel it waits D (0), then
//	                   says "cancel=NS answered=NS" (when it got the
//	                   cancel, when it answers it) and answers cancelled
//	ignore-cancel      one chunk, then never answers, not even a cancel
//	late D TEXT...     ignores cancel, waits D, then answers TEXT
//	crash [CODE]       one chunk, a line on stderr, exits with CODE (1)
//	die [CODE]         a stamped chunk, then exits with CODE (1) at once
//	exit-after D [C]   exits with C (1) after D without answering
//	junk               non-JSON lines on stdout, then a normal answer
//	big N              one N-MiB chunk (a line that long), then "after big"
//	permission         a tool call that asks permission, then says what
//	                   was chosen; "permission-twice" asks twice;
//	                   answered "cancelled" before session/cancel, it
//	                   carries on and says so (as claude-agent-acp does);
//	                   "same-id" asks with the prompt's own request id
//	permission-for K O TITLE...
//	                   asks permission for a tool call of kind K ("-":
//	                   none) titled TITLE, offering the option kinds O
//	                   (comma-separated; "-": all four), each with its
//	                   kind as id; then says "chose ID" or "chose nothing"
//	elicit-form        asks a form (elicitation/create): name (required
//	                   text), count (integer 1-10), colour (red, green or
//	                   blue), ship (boolean); then says "answer: ACTION
//	                   CONTENT" (content as sorted JSON) or "answer: error
//	                   CODE", and ends ("cancelled" after session/cancel);
//	                   like real agents it waits for the answer forever
//	elicit-url [complete D]
//	                   asks to visit a URL (mode url) and says the answer;
//	                   with "complete", sends elicitation/complete D later
//	elicit-big         a form of six text fields and a 30-option choice
//	elicit-odd         a form with a nested object field
//	elicit-cancel-request [D]
//	                   asks the form, then D later (300ms) withdraws it
//	                   with $/cancel_request and says the answer
//	elicit-json PARAMS asks the question whose params are the JSON object
//	                   PARAMS (the session added; mode form unless it
//	                   says), as typed, and says the answer likewise
//	                   the elicit modes first check that the client
//	                   advertised the mode, and say so if not
//	tool-stuck         a tool call in_progress, then silence until cancel
//	tool-progress D N  a tool call updated every D, N times, then done
//	silent D           says nothing for D (honours cancel), then answers
//	spawn-child        starts a child that ignores SIGTERM, waits for cancel
//	alloc [N]          touches N MiB (256) of memory, a MiB at a time, keeps
//	                   it and answers "allocated N MiB" (a runaway build)
//	fork-bomb [N]      answers at once, then starts sleep(1) processes as
//	                   fast as it can, trying again whenever fork fails,
//	                   until N (1000) have started; never reaps them
//	terminal CMD...    runs CMD in a client terminal (shown in a tool call),
//	                   waits for it to exit, releases it, and answers
//	                   "exit: STATUS", "truncated: BOOL" and the output
//	terminal-env NAME=VALUE... -- CMD...
//	                   the same, with those variables in the terminal's
//	                   environment
//	terminals N        opens N client terminals (sleep) at once, answers
//	                   "opened K of N" and why the next was refused,
//	                   then releases them
//	terminal-long      a client terminal running a shell loop that prints
//	                   "tick" and has a sleeping grandchild; says
//	                   "grandchild:N shell:M" and waits for cancel,
//	                   leaving the terminal to the client
//	terminal-ignore-term
//	                   the same with a shell (and grandchild) ignoring
//	                   SIGTERM, printing nothing more
//	fs-read PATH       asks the client to read PATH, answers the content
//	fs-write PATH TEXT asks the client to write TEXT to PATH
//	unknown-request    sends the client a request it does not know
//	stderr N           N long stderr lines and one of 100 KiB
//	update-after       answers, then sends one more update
//	answer-twice [D]   answers, then D later (300ms) sends the same answer
//	other-session      sends an update for a session it never created
//	env                answers with its environment, one NAME=value a line
//	run CMD [ARGS...]  runs CMD itself in its directory, answers its output
//	probe WHAT...      a hostile agent: tries each WHAT and says "ok" or
//	                   why not: r:PATH reads, w:PATH writes, get:URL
//	                   fetches, tcp:HOST:PORT connects straight,
//	                   proxy:URL fetches through its HTTP(S)_PROXY (says
//	                   the body), connect:HOST:PORT asks HTTPS_PROXY for
//	                   a tunnel, unix:PATH asks a unix socket with a JSON
//	                   line (and says the answer), environ:TEXT looks for
//	                   TEXT in every /proc/*/environ it can read
//	sh SCRIPT          runs the rest of the prompt, as typed, with sh -c in
//	                   its directory; answers its output and "exit: ERR"
//	mcp-servers        answers with the session's mcpServers as received
//	                   (from session/new or session/load), raw JSON
//	settings           answers "model=M mode=D fast=B", the session's
//	                   choices (with Options.ConfigOptions or Modes)
//	switch WHAT VALUE  changes its own model or mode (WHAT) to VALUE and
//	                   tells the client: config_option_update, or
//	                   current_mode_update for the legacy modes
//	hold-options D     from now on answers session/set_config_option D
//	                   late (1m if D is not a duration), or -32800 at
//	                   once when the client withdraws it
//	withdrawn          answers "withdrawn: M1, M2" (or "none"): the
//	                   methods of the client's requests it withdrew with
//	                   $/cancel_request, in order
//	/NAME INPUT        runs one of the agent's commands (Options.Commands):
//	                   answers "ran /NAME with "INPUT""
//	diff [big [N]]     an edit tool call with diff content: a few lines of
//	                   main.go and a new NOTES.md, or N (400) changed lines
//	image              a message with an inline PNG between two chunks
//	resource-link PATH a resource_link to PATH: relative, in its directory
//	                   (a file made there unless one is there), or absolute
//	resource           a read tool call whose content embeds a text file
//	usage              a usage_update with cost; the answer carries usage
//	title TEXT         a session_info_update titling the session TEXT
//	session            answers "session SID (HOW); N earlier prompts;
//	                   last: TEXT": how this process has the session
//	                   (new, loaded, resumed, forked from P) and the
//	                   prompts it holds before this one (see sessions.go
//	                   for session/list, resume, close and fork)
//	unknown-update     between two chunks, an update of an unknown kind and
//	                   a chunk with a content block of an unknown type
//	flood-answer N [K] N MiB of answer in chunks of K KiB (64), lines of
//	                   a's, the first starting "BEGIN", the last ending
//	                   "END"; honours cancel. flood-thoughts: the same as
//	                   thoughts, then answers "thought a lot"
//	flood-tools N [K]  N tool calls, each with a title of K KiB (1) and a
//	                   diff of as much, completed; answers "made N tool
//	                   calls"
//	flood-input N [K]  N completed tool calls (64), each with a raw input
//	                   of K KiB (1024); answers "sent N inputs"
//	flood-plan N [K]   a plan of N entries of K KiB (1), sent ten times;
//	                   answers "planned N steps"
//	flood-unknown L K I
//	                   L updates of K KiB for each of I sessions that do
//	                   not exist (64, 1024, 8); answers "flooded"
//	                   (the -early-flood L:K:I flag does the same before
//	                   every session/new answer)
//	deep-request [D]   a fs/read_text_file with id "deep-1" whose path is
//	                   nested D (100000) deep; says what it was answered
//	fs-sparse [G L N]  a sparse file of G GiB (40) whose first line never
//	                   ends, its line L (2) asked for N (1) times at once;
//	                   says how many were answered, how, and how fast
//	anything else      a demo turn: thought, tool call, plan, echo
package fakeagent
