# bash completion for gllmctl(1): commands, their options, and files where a path goes.
# Installed to bash-completion's completions directory, where it loads on first use.

_gllmctl() {
    local cur prev words cword
    _init_completion 2>/dev/null || {
        cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
        words=("${COMP_WORDS[@]}") cword=$COMP_CWORD
    }
    local commands="status metrics drain reload client attn bench version help"
    local globals="--socket -s --json --format --no-color --help --version"

    case $prev in
        --socket | -s | --textfile | -o | --output | --lse)
            compopt -o filenames 2>/dev/null
            mapfile -t COMPREPLY < <(compgen -f -- "$cur")
            return ;;
        --dtype) mapfile -t COMPREPLY < <(compgen -W "f32 f16 bf16" -- "$cur"); return ;;
        --format) mapfile -t COMPREPLY < <(compgen -W "text json csv" -- "$cur"); return ;;
        --scale | --iters | --watch | --count) return ;;
    esac

    # The command: the first word that is neither an option nor an option's value.
    local i cmd=
    for ((i = 1; i < cword; i++)); do
        case ${words[i]} in
            --socket | -s | --format) ((i++)) ;;
            -*) ;;
            *) cmd=${words[i]}; break ;;
        esac
    done

    local opts
    case $cmd in
        "") mapfile -t COMPREPLY < <(compgen -W "$commands $globals" -- "$cur"); return ;;
        status) opts="--wide --watch --count" ;;
        metrics) opts="--textfile" ;;
        drain) opts="--wait" ;;
        reload) opts="" ;;
        client)
            # list, jobs ID, disconnect ID: the subcommand after "client".
            if [[ ${words[cword - 1]} == client && $cur != -* ]]; then
                mapfile -t COMPREPLY < <(compgen -W "list jobs disconnect" -- "$cur")
                return
            fi
            opts="" ;;
        attn)
            opts="--output --causal --scale --dtype --lse"
            if [[ $cur != -* ]]; then
                compopt -o filenames 2>/dev/null
                mapfile -t COMPREPLY < <(compgen -f -X '!*.npy' -- "$cur"; compgen -d -- "$cur")
                return
            fi ;;
        bench) opts="--decode --iters --wide" ;;
        version) opts="" ;;
        help) mapfile -t COMPREPLY < <(compgen -W "$commands" -- "$cur"); return ;;
    esac
    mapfile -t COMPREPLY < <(compgen -W "$opts $globals" -- "$cur")
}
complete -F _gllmctl gllmctl
