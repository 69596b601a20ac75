# SPDX-License-Identifier: MIT
# bash completion for ntfs-ctl (docs/install.md, "Shell completion").
#
# Nothing here lists commands or options: they are read from the program's
# own help (`ntfs-ctl --help`, `ntfs-ctl help COMMAND`), and session names
# from the daemon the command line talks to (`ntfs-ctl session ls`, through
# --socket PATH when the line has one, else $NTFS_SOCKET), so a newer
# ntfs-ctl or a new session needs no change here.

# The commands, one a line ("status", "session new", ...).
_ntfs_ctl_commands() {
    "$1" --help 2>/dev/null | awk '/^Commands:/ { f = 1; next }
        f && /^$/ { exit }
        f { sub(/^ +/, ""); split($0, a, /  +/); print a[1] }'
}

# The names of the sessions of the daemon at socket $2 (or the default).
_ntfs_ctl_sessions() {
    local -a sock=()
    [[ -n $2 ]] && sock=(--socket "$2")
    "$1" "${sock[@]}" session ls 2>/dev/null | awk 'NR == 1 && $1 != "NAME" { exit } NR > 1 { print $1 }'
}

# The usage line of command $2 (its words after the command).
_ntfs_ctl_usage() {
    "$1" help $2 2>/dev/null | sed -n '1s/^usage: ntfs-ctl \[--socket PATH\] \[--json\] //p'
}

_ntfs_ctl() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    local prog=${COMP_WORDS[0]} socket="" w i
    local -a words=()
    COMPREPLY=()
    # the global options, wherever they are; the other words before the cursor
    for ((i = 1; i < COMP_CWORD; i++)); do
        w=${COMP_WORDS[i]}
        case $w in
            --socket) ((i++)); socket=${COMP_WORDS[i]} ;;
            --socket=*) socket=${w#--socket=} ;;
            --json) ;;
            *) words+=("$w") ;;
        esac
    done
    if [[ $prev == --socket ]]; then
        COMPREPLY=($(compgen -f -- "$cur"))
        return
    fi
    # 'ntfs-ctl' alone or a group ('session', 'trunk', 'remote'): the next word
    local commands cmd="" n=0
    commands=$(_ntfs_ctl_commands "$prog")
    if ((${#words[@]} >= 2)) && grep -qxF -- "${words[0]} ${words[1]}" <<<"$commands"; then
        cmd="${words[0]} ${words[1]}"; n=2
    elif ((${#words[@]} >= 1)) && grep -qxF -- "${words[0]}" <<<"$commands"; then
        cmd=${words[0]}; n=1
    fi
    if [[ -z $cmd ]]; then
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "--socket --json --help --version" -- "$cur"))
        elif ((${#words[@]} == 0)); then
            COMPREPLY=($(compgen -W "$(cut -d' ' -f1 <<<"$commands" | sort -u) help" -- "$cur"))
        elif ((${#words[@]} == 1)); then
            COMPREPLY=($(compgen -W "$(awk -v g="${words[0]}" '$1 == g && NF > 1 { print $2 }' <<<"$commands")" -- "$cur"))
        fi
        return
    fi
    local usage
    usage=$(_ntfs_ctl_usage "$prog" "$cmd")
    # its options, and which of them take a value
    local opts valued
    opts=$({ grep -oE -- '(^| |\[|\(|\|)--?[a-zA-Z][a-zA-Z-]*' <<<"$usage"
             "$prog" help $cmd 2>/dev/null | grep -oE -- '^ +--?[a-zA-Z][a-zA-Z-]*'; } | sed 's/^[ [(|]*//' | sort -u)
    valued=$(grep -oE -- '--?[a-zA-Z][a-zA-Z-]* [A-Z][A-Z_|]*' <<<"$usage" | cut -d' ' -f1)
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$opts --help" -- "$cur"))
        return
    fi
    if grep -qxF -- "$prev" <<<"$valued"; then
        case $prev in
            --from|--into) COMPREPLY=($(compgen -W "$(_ntfs_ctl_sessions "$prog" "$socket")" -- "$cur")) ;;
        esac
        return
    fi
    # the position of the word at the cursor among the command's arguments
    local k=0
    for ((i = n; i < ${#words[@]}; i++)); do
        w=${words[i]}
        [[ $w == -- ]] && return  # a command line for the jail follows
        if [[ $w == -* ]]; then
            grep -qxF -- "$w" <<<"$valued" && ((i++))
            continue
        fi
        ((k++))
    done
    local placeholders what
    read -r -a placeholders <<<"$(sed -E 's/\[[^]]*\]//g; s/\([^)]*\)//g' <<<"${usage#"$cmd"}")"
    what=${placeholders[k]%%\[*}
    case "$cmd:$what" in
        "session new:"*|"import:"*|"remote add:"*|"remote rm:"*|"trunk init:"*) ;;
        *:NAME|*:SESSION|*:TRUNK)
            COMPREPLY=($(compgen -W "$(_ntfs_ctl_sessions "$prog" "$socket")" -- "$cur")) ;;
        *:MOUNTPOINT) COMPREPLY=($(compgen -d -- "$cur")) ;;
        *:FILE) COMPREPLY=($(compgen -f -- "$cur")) ;;
    esac
}

complete -F _ntfs_ctl ntfs-ctl
