//! A model file's Jinja chat template on minijinja, inside its bounds: its
//! steps (minijinja's fuel, which also pays for the text and lists a
//! template builds, 64 bytes a step), the text it writes
//! ([`MAX_RENDER_BYTES`]) and what minijinja may print on its behalf
//! ([`super::bounds`]).

use std::sync::Arc;

use minijinja::machinery::{self, CompiledTemplate, TemplateConfig};
use minijinja::value::Value;
use minijinja::{AutoEscape, Environment, Error, ErrorKind, State};

use super::{bounds, functions, namespaces, DEFAULT_TEMPLATE_STEPS, MAX_RENDER_BYTES};
use crate::TokenizerError;

const TEMPLATE_NAME: &str = "chat";

/// A checked template: its source and the environment it renders in.
#[derive(Clone)]
pub(super) struct Jinja {
    pub(super) env: Environment<'static>,
    pub(super) source: String,
}

impl Jinja {
    /// The template `source`; fails if it does not compile or is refused.
    pub(super) fn new(source: &str) -> Result<Self, TokenizerError> {
        let mut env = Environment::new();
        env.set_syntax(syntax()?);
        // minijinja's debug mode (on in builds with debug assertions) puts
        // the render's variables into error messages; formatting a huge or
        // deeply nested one took minutes (found by fuzzing). Errors name the
        // problem and line either way.
        env.set_debug(false);
        env.add_function("raise_exception", functions::raise_exception);
        env.add_function("strftime_now", functions::strftime_now);
        env.add_filter("tojson", functions::tojson);
        env.set_unknown_method_callback(functions::python_methods);
        env.set_fuel(Some(DEFAULT_TEMPLATE_STEPS));
        env.set_formatter(bounded_output);
        bounds::install(&mut env);
        // The checks read the syntax tree only; compiling comes after them,
        // since it folds constant expressions, which a refused template
        // could make huge.
        namespaces::check(source).map_err(|e| TokenizerError::Template(format!("refused: {e}")))?;
        bounds::check(source).map_err(|e| TokenizerError::Template(format!("refused: {e}")))?;
        compile(source)
            .map_err(|e| TokenizerError::Template(format!("does not compile: {e:#}")))?;
        Ok(Self {
            env,
            source: source.to_string(),
        })
    }

    /// Render with `ctx` as the template's variables.
    pub(super) fn render(&self, ctx: Value) -> Result<String, Error> {
        let compiled = compile(&self.source)?;
        let mut text = String::new();
        let mut out = machinery::make_string_output(&mut text);
        machinery::eval(
            &self.env,
            &compiled.instructions,
            ctx,
            &compiled.blocks,
            &mut out,
            AutoEscape::None,
        )?;
        // What `{{ }}` prints is counted as it goes (`bounded_output`); the
        // text between tags is paid for by fuel, and checked here.
        if text.len() > MAX_RENDER_BYTES {
            return Err(over_the_bound());
        }
        Ok(text)
    }
}

/// transformers renders chat templates with these two options on, and
/// templates are written for them.
fn syntax() -> Result<minijinja::syntax::SyntaxConfig, TokenizerError> {
    minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build()
        .map_err(|e| TokenizerError::Template(format!("syntax settings: {e}")))
}

/// `source` compiled, with minijinja's printing of values guarded
/// ([`bounds::patch`]). Compiling takes a fraction of a millisecond, so a
/// render compiles afresh rather than keep code that borrows the source.
fn compile(source: &str) -> Result<CompiledTemplate<'_>, Error> {
    let config = TemplateConfig {
        syntax_config: syntax().map_err(|e| Error::new(ErrorKind::SyntaxError, e.to_string()))?,
        default_auto_escape: Arc::new(|_: &str| AutoEscape::None),
    };
    let mut compiled = CompiledTemplate::new(TEMPLATE_NAME, source, &config)?;
    bounds::patch(&mut compiled.instructions);
    for block in compiled.blocks.values_mut() {
        bounds::patch(block);
    }
    Ok(compiled)
}

/// The text `{{ }}` has printed so far in a render.
#[derive(Default)]
struct Printed(usize);

/// minijinja's own formatting, after a look at how large the value is: the
/// render's printed text is refused once it passes [`MAX_RENDER_BYTES`], and
/// a sequence that would print more (`[1] * 10**8`) is refused by its
/// element count first, looking at no more elements than the bound allows.
fn bounded_output(
    out: &mut minijinja::Output,
    state: &mut State,
    value: &Value,
) -> Result<(), Error> {
    let size = match value.as_str() {
        Some(text) => text.len(),
        None => bounds::prints_at_least(value, MAX_RENDER_BYTES).bytes,
    };
    let printed = state.get_or_insert_extension(Printed::default());
    printed.0 = printed.0.saturating_add(size);
    if printed.0 > MAX_RENDER_BYTES || size > MAX_RENDER_BYTES {
        return Err(over_the_bound());
    }
    minijinja::escape_formatter(out, state, value)
}

/// The error of a render that wrote too much.
pub(super) fn over_the_bound() -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("the template wrote more than {MAX_RENDER_BYTES} bytes"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ChatMessage;

    /// The environment as it was before the guards: the same settings and
    /// functions, minijinja's own filters and operators.
    fn unguarded() -> Environment<'static> {
        let mut env = Environment::new();
        env.set_syntax(syntax().unwrap());
        env.set_debug(false);
        env.add_function("raise_exception", functions::raise_exception);
        env.add_function("strftime_now", functions::strftime_now);
        env.add_filter("tojson", functions::tojson);
        env.set_unknown_method_callback(functions::python_methods);
        env.set_fuel(Some(DEFAULT_TEMPLATE_STEPS));
        env
    }

    fn conversations() -> Vec<Vec<ChatMessage>> {
        let long = "a long message, with <b>markup</b> & quotes \"'\" ".repeat(200);
        vec![
            vec![ChatMessage::user("Hi")],
            vec![
                ChatMessage::system("Be brief."),
                ChatMessage::user("  What is 2 + 2?  "),
                ChatMessage::assistant("4"),
                ChatMessage::user(long),
            ],
            vec![
                ChatMessage::user("First"),
                ChatMessage::assistant("<think>hmm</think>Second"),
                ChatMessage::user("Third ~ in [1, 2]"),
            ],
        ]
    }

    /// Every real template of the fixtures writes, through the guards,
    /// exactly the text it wrote without them.
    #[test]
    fn guards_leave_real_templates_text_unchanged() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut paths = vec![
            root.join("../../fuzz/seeds/chat_template/gemma2.jinja"),
            root.join("../../fuzz/seeds/chat_template/gemma3.jinja"),
            root.join("../../fuzz/seeds/chat_template/chatml-think.jinja"),
        ];
        for entry in std::fs::read_dir(root.join("tests/fixtures/templates")).unwrap() {
            paths.push(entry.unwrap().path());
        }
        let mut compared = 0;
        for path in paths
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "jinja"))
        {
            let source = std::fs::read_to_string(path).unwrap();
            let guarded = Jinja::new(&source).unwrap();
            let plain = unguarded();
            for messages in conversations() {
                for thinking in [false, true] {
                    let ctx = || {
                        minijinja::context! {
                            messages => Value::from(minijinja::value::Serde(&messages)),
                            bos_token => "<bos>",
                            eos_token => "<eos>",
                            add_generation_prompt => true,
                            enable_thinking => thinking,
                        }
                    };
                    let before = plain.render_str(&source, ctx()).map_err(|e| e.to_string());
                    let after = guarded.render(ctx()).map_err(|e| e.to_string());
                    match (&before, &after) {
                        (Ok(b), Ok(a)) => assert!(a == b, "{}", path.display()),
                        (Err(_), Err(_)) => {}
                        _ => panic!("{}: {before:?} / {after:?}", path.display()),
                    }
                    compared += usize::from(after.is_ok());
                }
            }
        }
        assert!(compared >= 60, "{compared}");
    }
}
