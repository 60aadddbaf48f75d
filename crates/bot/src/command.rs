//! The bot's commands: `/start`, `/help`, `/reset`, `/system TEXT`,
//! `/guard on|off` and `/stats`. Telegram appends `@BotName` to commands in
//! groups; that suffix is ignored.

/// A parsed command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Greeting and help.
    Start,
    /// The command list.
    Help,
    /// Forget the conversation.
    Reset,
    /// Set the system prompt (`None`: clear it).
    System(Option<String>),
    /// Turn the guardrails on or off; `None`: say how they are.
    Guard(Option<bool>),
    /// Usage counters.
    Stats,
    /// A command the bot does not know (its name, without the slash).
    Unknown(String),
}

/// The command in `text`, or `None` for ordinary text.
pub fn parse_command(text: &str) -> Option<Command> {
    let text = text.trim_start();
    let rest = text.strip_prefix('/')?;
    let (word, arg) = match rest.find(char::is_whitespace) {
        Some(i) => (&rest[..i], rest[i..].trim()),
        None => (rest, ""),
    };
    let name = word.split('@').next().unwrap_or("").to_lowercase();
    if name.is_empty() {
        return None;
    }
    Some(match name.as_str() {
        "start" => Command::Start,
        "help" => Command::Help,
        "reset" | "new" | "clear" => Command::Reset,
        "system" => Command::System((!arg.is_empty()).then(|| arg.to_owned())),
        "guard" => Command::Guard(match arg.to_lowercase().as_str() {
            "on" | "yes" | "1" | "true" => Some(true),
            "off" | "no" | "0" | "false" => Some(false),
            _ => None,
        }),
        "stats" => Command::Stats,
        _ => Command::Unknown(name.chars().take(64).collect()),
    })
}

/// The command list, as `/help` prints it.
pub const HELP: &str = "\
/reset — forget this conversation
/system TEXT — set how I should behave (/system alone clears it)
/guard on|off — check my answers with tools (arithmetic, logic, stated constraints)
/stats — what this chat has used
/help — this list";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_plain_text() {
        assert_eq!(parse_command("/start"), Some(Command::Start));
        assert_eq!(parse_command("/help@HearthBot"), Some(Command::Help));
        assert_eq!(parse_command("  /RESET"), Some(Command::Reset));
        assert_eq!(
            parse_command("/system  You are a pirate.  "),
            Some(Command::System(Some("You are a pirate.".into())))
        );
        assert_eq!(parse_command("/system"), Some(Command::System(None)));
        assert_eq!(parse_command("/guard on"), Some(Command::Guard(Some(true))));
        assert_eq!(
            parse_command("/guard OFF"),
            Some(Command::Guard(Some(false)))
        );
        assert_eq!(parse_command("/guard"), Some(Command::Guard(None)));
        assert_eq!(parse_command("/stats"), Some(Command::Stats));
        assert_eq!(
            parse_command("/fly away"),
            Some(Command::Unknown("fly".into()))
        );
        assert_eq!(parse_command("hello /start"), None);
        assert_eq!(parse_command("/"), None);
        assert_eq!(parse_command("/ space"), None);
        assert_eq!(parse_command("1/2 is a half"), None);
    }
}
