"""``ensure-flydsl completion bash|zsh|fish``: a completion script, written from the parsers themselves (the
command table and the settings table), with no library: each script holds the commands, their options and
the values those take, so completing runs no Python at all.

What a script offers at the cursor: after a flag that takes a value, that value (a choice, else a path where
the value is one, else nothing); otherwise, after the words typed so far name a command (``cache list``), that
command's options when the word begins with ``-``, else its commands or the choices of its argument.  The
options of a command are its own, -q/-v and the settings its help lists; before any command, those of
``ensure`` (the default command), ``-V`` and the commands.
"""

from __future__ import annotations

import argparse
from typing import Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

from ensure_flydsl.cli.commands import COMMANDS, command_at
from ensure_flydsl.cli.parser import build_parser, public
from ensure_flydsl.settings import SETTING_BY_NAME, STRATEGIES
from ensure_flydsl.version import __version__

# The settings whose value is a path (or a command found on PATH, or a .pub file): completed as files.
PATH_SETTINGS = frozenset({"root", "lock_file", "fail_marker", "rocm_path", "mlir_path", "python", "shim_dir",
                           "repo", "cache", "cache_signing_key", "cache_trusted_keys"})
SETTING_VALUES: Dict[str, Tuple[str, ...]] = {"strategy": STRATEGIES}
PATH_METAVARS = frozenset({"DIR", "PATH"})


class Option(NamedTuple):
    flags: Tuple[str, ...]
    help: str
    takes_value: bool
    values: Tuple[str, ...]  # offered after it
    files: bool  # its value is a path


class Node(NamedTuple):
    """What can follow the command ``path`` ("" before any command, "cache list" for a cache command)."""

    path: str
    options: Tuple[Option, ...]
    words: Tuple[Tuple[str, str], ...]  # (word, what it is): its commands, or its argument's choices
    commands: bool  # the words are commands: each one leads to a Node of its own
    files: bool  # its argument is a path


def completion(shell: str) -> int:
    writer = {"bash": bash_script, "zsh": zsh_script, "fish": fish_script}[shell]
    print(writer(nodes()), end="")
    return 0


def nodes() -> List[Node]:
    found = [_top()]
    for name in public(COMMANDS):
        actions = COMMANDS[name].actions
        if actions is None:
            found.append(_leaf((name,)))
            continue
        found.append(Node(path=name,
                          options=(Option(flags=("-h", "--help"), help="show this help", takes_value=False,
                                          values=(), files=False),),
                          words=tuple((a, actions[a].help or "") for a in public(actions)),
                          commands=True,
                          files=False))
        found += [_leaf((name, action)) for action in public(actions)]
    return found


def _top() -> Node:
    ensure = _leaf(("ensure",))
    version = Option(flags=("-V", "--version"),
                     help="print the version (and the commit, when known)",
                     takes_value=False,
                     values=(),
                     files=False)
    commands = tuple((name, COMMANDS[name].help or "") for name in public(COMMANDS))
    return Node(path="",
                options=ensure.options + (version,),
                words=commands,
                commands=True,
                files=False)


def _leaf(path: Sequence[str]) -> Node:
    command = command_at(path)
    options: List[Option] = []
    words: Tuple[Tuple[str, str], ...] = ()
    files = False
    for action in build_parser(*path)._actions:
        if not action.option_strings:
            if action.choices:
                words = tuple((str(choice), "") for choice in action.choices)
            elif tuple(path) == ("help",):
                words = tuple((name, COMMANDS[name].help or "") for name in public(COMMANDS))
                words += (("settings", "every setting"),)
            else:
                files = action.metavar in PATH_METAVARS
            continue
        option = _option(action, command.settings)
        if option is not None:
            options.append(option)
    return Node(path=" ".join(path),
                options=tuple(options),
                words=words,
                commands=False,
                files=files)


def _option(action: argparse.Action, shown: Optional[Sequence[str]]) -> Optional[Option]:
    takes = action.nargs != 0
    if action.help == argparse.SUPPRESS:  # a setting's flag: offered where the command's help lists it
        setting = SETTING_BY_NAME.get(action.dest)
        if setting is None or (shown is not None and setting.name not in shown):
            return None
        files = takes and setting.name in PATH_SETTINGS
        values = SETTING_VALUES.get(setting.name, ())
        return Option(flags=tuple(action.option_strings),
                      help=setting.help,
                      takes_value=takes,
                      values=values,
                      files=files)
    values = tuple(str(c) for c in action.choices) if action.choices else ()
    return Option(flags=tuple(action.option_strings),
                  help=action.help or "",
                  takes_value=takes,
                  values=values,
                  files=takes and action.metavar in PATH_METAVARS)


def _flags(found: Sequence[Node], which: str) -> List[str]:
    """Every flag of ``which`` kind: "valued" (the word after it is its value), "files", or "other" valued."""
    flags: Set[str] = set()
    for node in found:
        for option in node.options:
            if not option.takes_value:
                continue
            if which == "valued" or (which == "files") == option.files and not option.values:
                flags.update(option.flags)
    return sorted(flags)


def _choices(found: Sequence[Node]) -> Dict[str, Tuple[str, ...]]:
    return {flag: option.values for node in found for option in node.options if option.values
            for flag in option.flags}


def _subs(found: Sequence[Node]) -> List[Tuple[str, str]]:
    """(path, its commands separated by spaces), for the nodes whose words are commands."""
    return [(node.path, " ".join(word for word, _ in node.words)) for node in found if node.commands]


def _case(flags: Sequence[str], then: str, indent: str, why: str) -> str:
    """One branch of a shell's ``case`` for ``flags`` (a comment when there are none: no empty pattern)."""
    if not flags:
        return f"{indent.rstrip('(')}# (no such flags)"
    comment = f"  # {why}" if why else ""
    return f"{indent}{'|'.join(flags)}) {then} ;;{comment}"


def _all_flags(node: Node) -> str:
    return " ".join(flag for option in node.options for flag in option.flags)


def _header(shell: str, use: str) -> str:
    return (f"# {shell} completion for ensure-flydsl {__version__}, made by `ensure-flydsl completion {shell}`\n"
            f"# {use}\n")


def bash_script(found: Sequence[Node]) -> str:
    subs = "\n".join(f'        "{path}") printf "%s" "{words}" ;;' for path, words in _subs(found))
    values = "\n".join(f'        {flag}) COMPREPLY=($(compgen -W "{" ".join(v)}" -- "$cur")); return 0 ;;'
                       for flag, v in sorted(_choices(found).items()))
    nodes_case = "\n".join(
        f'        "{node.path}") opts="{_all_flags(node)}"; words="{" ".join(w for w, _ in node.words)}" ;;'
        for node in found)
    return _header("bash", "install: ensure-flydsl completion bash > ~/.local/share/bash-completion/completions/"
                   "ensure-flydsl") + f'''
_ensure_flydsl_subs() {{
    case "$1" in
{subs}
    esac
}}

_ensure_flydsl_path() {{
    # The command the words before the cursor name: "", "status", "cache list".
    local i word path=""
    for ((i = 1; i < COMP_CWORD; i++)); do
        word="${{COMP_WORDS[i]}}"
        case "$word" in
            --) break ;;
            {"|".join(_flags(found, "valued"))}) ((i++)) ;;
            -*) ;;
            *) case " $(_ensure_flydsl_subs "$path") " in
                   *" $word "*) path="${{path:+$path }}$word" ;;
               esac ;;
        esac
    done
    printf "%s" "$path"
}}

_ensure_flydsl() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}" opts="" words=""
    COMPREPLY=()
    case "$prev" in
{values}
{_case(_flags(found, "files"), "return 0", "        ", "a path: the shell's own file completion")}
{_case(_flags(found, "other"), "return 0", "        ", "a value of its own: nothing to offer")}
    esac
    case "$(_ensure_flydsl_path)" in
{nodes_case}
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    elif [[ -n "$words" ]]; then
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    fi
    return 0
}}

complete -o default -F _ensure_flydsl ensure-flydsl
'''


def zsh_script(found: Sequence[Node]) -> str:
    subs = "\n".join(f'    ("{path}") print -r -- "{words}" ;;' for path, words in _subs(found))
    values = "\n".join(f'    ({flag}) compadd -- {" ".join(v)}; return ;;'
                       for flag, v in sorted(_choices(found).items()))
    nodes_case = "\n".join(
        f'    ("{node.path}") opts=({_all_flags(node)}); choices=({" ".join(w for w, _ in node.words)}); '
        f'files={int(node.files)} ;;' for node in found)
    return "#compdef ensure-flydsl\n" + _header(
        "zsh", 'use: eval "$(ensure-flydsl completion zsh)" in ~/.zshrc after compinit, or save it as '
        "_ensure-flydsl in a folder of $fpath") + f'''
_ensure_flydsl_subs() {{
  case "$1" in
{subs}
  esac
}}

_ensure_flydsl() {{
  local cur="${{words[CURRENT]}}" prev="${{words[CURRENT-1]}}" cmdpath="" word files=0
  local -a subs opts choices
  local -i i
  for (( i = 2; i < CURRENT; i++ )); do
    word="${{words[i]}}"
    case "$word" in
      (--) break ;;
      ({"|".join(_flags(found, "valued"))}) (( i++ )) ;;
      (-*) ;;
      (*) subs=(${{=$(_ensure_flydsl_subs "$cmdpath")}})
          if (( ${{subs[(Ie)$word]}} )); then cmdpath="${{cmdpath:+$cmdpath }}$word"; fi ;;
    esac
  done
  case "$prev" in
{values}
{_case(_flags(found, "files"), "_files; return", "    (", "")}
{_case(_flags(found, "other"), "return 1", "    (", "")}
  esac
  case "$cmdpath" in
{nodes_case}
  esac
  if [[ "$cur" == -* ]]; then
    compadd -- "${{opts[@]}}"
  elif (( ${{#choices}} )); then
    compadd -- "${{choices[@]}}"
  elif (( files )); then
    _files
  fi
}}

if [[ "${{zsh_eval_context[-1]}}" == loadautofunc ]]; then
  _ensure_flydsl "$@"
else
  compdef _ensure_flydsl ensure-flydsl
fi
'''


def _fish_text(text: str) -> str:
    first = text.split("; ")[0].split(" (")[0].strip()
    first = first if len(first) <= 70 else first[:67] + "..."
    return "'" + first.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish_option(node: Node, option: Option) -> str:
    parts = [f"complete -c ensure-flydsl -n '__ensure_flydsl_at \"{node.path}\"'"]
    for flag in option.flags:
        parts.append(f"-l {flag[2:]}" if flag.startswith("--") else f"-s {flag[1:]}")
    if option.values:
        parts.append(f"-x -a '{' '.join(option.values)}'")
    elif option.files:
        parts.append("-r -F")
    elif option.takes_value:
        parts.append("-x")
    if option.help:
        parts.append(f"-d {_fish_text(option.help)}")
    return " ".join(parts)


def fish_script(found: Sequence[Node]) -> str:
    subs = "\n".join(f"        case '{path}'\n            printf '%s\\n' {words}" for path, words in _subs(found))
    lines: List[str] = []
    for node in found:
        for word, what in node.words:
            described = f" -d {_fish_text(what)}" if what else ""
            lines.append(f"complete -c ensure-flydsl -n '__ensure_flydsl_at \"{node.path}\"' -a {word}{described}")
        if node.files:
            lines.append(f"complete -c ensure-flydsl -n '__ensure_flydsl_at \"{node.path}\"' -F")
        lines += [_fish_option(node, option) for option in node.options]
    use = "install: ensure-flydsl completion fish > ~/.config/fish/completions/ensure-flydsl.fish"
    return _header("fish", use) + f'''
function __ensure_flydsl_subs
    switch "$argv[1]"
{subs}
    end
end

function __ensure_flydsl_path --description 'the command the words before the cursor name'
    set -l cmdpath
    set -l skip 0
    for token in (commandline -opc)[2..-1]
        if test $skip = 1
            set skip 0
            continue
        end
        switch $token
            case --
                break
            case {" ".join(_flags(found, "valued"))}
                set skip 1
            case '-*'
            case '*'
                if contains -- $token (__ensure_flydsl_subs "$cmdpath")
                    set -a cmdpath $token
                end
        end
    end
    echo "$cmdpath"
end

function __ensure_flydsl_at
    set -l here (__ensure_flydsl_path)
    test "$here" = "$argv[1]"
end

complete -c ensure-flydsl -f
''' + "\n".join(lines) + "\n"
