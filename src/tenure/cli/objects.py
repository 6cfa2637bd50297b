"""``tenure objects`` — the object store itself: encryption at rest (docs/adr/0026-encryption-at-rest.md)."""

from __future__ import annotations

import click

from tenure.cli.context import Config, key_source
from tenure.cli.output import console, emit, json_option
from tenure.errors import ConfigurationError


@click.group()
def objects() -> None:
    """Object store maintenance: encryption at rest and key rotation."""


def _url(ctx: click.Context) -> str:
    root = ctx.find_root().obj
    return Config.resolve(root.get("data"), root.get("db"), root.get("objects")).objects_url


@objects.command()
@click.option("--encrypt", is_flag=True, help="Encrypt the new object store under the given passphrase or key file.")
@json_option
@click.pass_context
def init(ctx: click.Context, encrypt: bool) -> None:
    """Prepare an empty object store; with --encrypt, every object is sealed (needs TENURE_PASSPHRASE or a key file)."""
    from tenure.objects.base import open_backend
    from tenure.objects.crypto import init_encryption, unlock

    key = key_source(ctx)
    store = open_backend(_url(ctx))
    try:
        if encrypt:
            if key is None:
                raise ConfigurationError(
                    "`tenure objects init --encrypt` needs the key to encrypt under",
                    code="key-required",
                    hint="set TENURE_PASSPHRASE or TENURE_KEY_FILE (or pass --passphrase-file / --key-file)",
                )
            init_encryption(store, key)
        else:
            unlock(store, key)
        identity = store.ensure_identity()
    finally:
        store.close()
    emit(
        ctx,
        {"identity": identity, "encrypted": encrypt},
        lambda: console.print(f"object store ready ({'encrypted' if encrypt else 'not encrypted'}): {identity}"),
    )


@objects.command()
@click.option(
    "--new-key-file",
    envvar="TENURE_NEW_KEY_FILE",
    metavar="FILE",
    help="Wrap the data key under this key file (env TENURE_NEW_KEY_FILE).",
)
@click.option(
    "--new-passphrase-file",
    metavar="FILE",
    help="Wrap the data key under the passphrase on FILE's first line (or set TENURE_NEW_PASSPHRASE).",
)
@click.option("--keep-old", is_flag=True, help="Keep the other wrapped copies (both keys open the store).")
@json_option
@click.pass_context
def rekey(ctx: click.Context, new_key_file: str | None, new_passphrase_file: str | None, keep_old: bool) -> None:
    """Re-wrap the data key under a new passphrase or key file; no object is rewritten."""
    from tenure.objects.base import open_backend
    from tenure.objects.crypto import KeyRequiredError, KeySource, key_slots
    from tenure.objects.crypto import rekey as run

    current = key_source(ctx)
    if current is None:
        raise KeyRequiredError("`tenure objects rekey` needs the current passphrase or key file")
    new = KeySource.resolve(passphrase_file=new_passphrase_file, key_file=new_key_file, prefix="TENURE_NEW_")
    if new is None:
        raise ConfigurationError(
            "`tenure objects rekey` needs the new key",
            code="key-required",
            hint="set TENURE_NEW_PASSPHRASE or TENURE_NEW_KEY_FILE (or pass --new-passphrase-file / --new-key-file)",
        )
    store = open_backend(_url(ctx))
    try:
        slot = run(store, current, new, keep_old=keep_old)
        copies = key_slots(store)
    finally:
        store.close()
    emit(
        ctx,
        {"key_object": slot, "key_objects": copies},
        lambda: console.print(f"data key re-wrapped into {slot}; wrapped copies: {', '.join(copies)}"),
    )


@objects.command()
@json_option
@click.pass_context
def status(ctx: click.Context) -> None:
    """Whether the object store is encrypted, and its wrapped key copies (no key needed)."""
    from tenure.objects.base import open_backend
    from tenure.objects.crypto import key_slots

    store = open_backend(_url(ctx))
    try:
        copies = key_slots(store)
        identity = store.identity()
    finally:
        store.close()
    emit(
        ctx,
        {"identity": identity, "encrypted": bool(copies), "key_objects": copies},
        lambda: console.print(
            f"encrypted: {len(copies)} wrapped key(s) ({', '.join(copies)})" if copies else "not encrypted"
        ),
    )
