# fish completion for gllmctl(1): commands, their options, and files where a path goes.
# Installed to fish's vendor completions directory.

set -l commands status metrics drain reload client attn bench version help
complete -c gllmctl -f
complete -c gllmctl -s s -l socket -r -F -d "gllmd socket"
complete -c gllmctl -l json -d "machine-readable output"
complete -c gllmctl -l format -x -a "text json csv" -d "output format"
complete -c gllmctl -l no-color -d "no colour"
complete -c gllmctl -s h -l help -d "help"
complete -c gllmctl -l version -d "versions of gllmctl and libgllm-client"

complete -c gllmctl -n "not __fish_seen_subcommand_from $commands" -a status -d "the daemon, its devices, clients and job counts"
complete -c gllmctl -n "not __fish_seen_subcommand_from $commands" -a metrics -d "metrics in the Prometheus text format"
complete -c gllmctl -n "not __fish_seen_subcommand_from $commands" -a drain -d "stop gllmd gracefully (administrators)"
complete -c gllmctl -n "not __fish_seen_subcommand_from $commands" -a reload -d "re-read gllmd.conf (administrators)"
complete -c gllmctl -n "not __fish_seen_subcommand_from $commands" -a client -d "connections: list, jobs, disconnect (administrators)"
complete -c gllmctl -n "not __fish_seen_subcommand_from $commands" -a attn -d "one attention job on .npy files"
complete -c gllmctl -n "not __fish_seen_subcommand_from $commands" -a bench -d "time standard shapes through the daemon"
complete -c gllmctl -n "not __fish_seen_subcommand_from $commands" -a version -d "versions, gllmd's included"
complete -c gllmctl -n "not __fish_seen_subcommand_from $commands" -a help -d "help on a command"

complete -c gllmctl -n "__fish_seen_subcommand_from status" -l wide -d "every column"
complete -c gllmctl -n "__fish_seen_subcommand_from status" -l watch -d "again every SECS seconds"
complete -c gllmctl -n "__fish_seen_subcommand_from status" -l count -x -d "with --watch: stop after N reports"
complete -c gllmctl -n "__fish_seen_subcommand_from metrics" -l textfile -r -F -d "write atomically to PATH"
complete -c gllmctl -n "__fish_seen_subcommand_from drain" -l wait -d "return once gllmd has stopped"
complete -c gllmctl -n "__fish_seen_subcommand_from client; and not __fish_seen_subcommand_from list jobs disconnect" -a "list jobs disconnect"
complete -c gllmctl -n "__fish_seen_subcommand_from attn" -s o -l output -r -F -d "output .npy"
complete -c gllmctl -n "__fish_seen_subcommand_from attn" -l causal -d "bottom-right causal mask"
complete -c gllmctl -n "__fish_seen_subcommand_from attn" -l scale -x -d "instead of 1/sqrt(D)"
complete -c gllmctl -n "__fish_seen_subcommand_from attn" -l dtype -x -a "f32 f16 bf16" -d "job dtype"
complete -c gllmctl -n "__fish_seen_subcommand_from attn" -l lse -r -F -d "log-sum-exp output"
complete -c gllmctl -n "__fish_seen_subcommand_from attn" -F
complete -c gllmctl -n "__fish_seen_subcommand_from bench" -l decode -d "paged decode"
complete -c gllmctl -n "__fish_seen_subcommand_from bench" -l iters -x -d "repetitions per shape"
complete -c gllmctl -n "__fish_seen_subcommand_from bench" -l wide -d "every column"
complete -c gllmctl -n "__fish_seen_subcommand_from help" -a "$commands"
