# bash completion for gllmctl(1): commands, their options, and files where a path goes.
# Installed to bash-completion's completions directory, where it loads on first use.

_gllmctl() {
    local cur prev words cword
    _init_completion 2>/dev/null || {
        cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
        words=("${COMP_WORDS[@]}") cword=$COMP_CWORD
    }
    local commands="status metrics attn bench version help"
    local globals="--socket --json --no-color --help --version"

    case $prev in
        --socket | --textfile | -o | --output | --lse)
            compopt -o filenames 2>/dev/null
            mapfile -t COMPREPLY < <(compgen -f -- "$cur")
            return ;;
        --dtype) mapfile -t COMPREPLY < <(compgen -W "f32 f16 bf16" -- "$cur"); return ;;
        --scale | --iters) return ;;
    esac

    # The command: the first word that is neither an option nor an option's value.
    local i cmd=
    for ((i = 1; i < cword; i++)); do
        case ${words[i]} in
            --socket) ((i++)) ;;
            -*) ;;
            *) cmd=${words[i]}; break ;;
        esac
    done

    local opts
    case $cmd in
        "") mapfile -t COMPREPLY < <(compgen -W "$commands $globals" -- "$cur"); return ;;
        status) opts="--wide" ;;
        metrics) opts="--textfile" ;;
        attn)
            opts="--output --causal --scale --dtype --lse"
            if [[ $cur != -* ]]; then
                compopt -o filenames 2>/dev/null
                mapfile -t COMPREPLY < <(compgen -f -X '!*.npy' -- "$cur"; compgen -d -- "$cur")
                return
            fi ;;
        bench) opts="--decode --iters" ;;
        version) opts="" ;;
        help) mapfile -t COMPREPLY < <(compgen -W "$commands" -- "$cur"); return ;;
    esac
    mapfile -t COMPREPLY < <(compgen -W "$opts $globals" -- "$cur")
}
complete -F _gllmctl gllmctl
