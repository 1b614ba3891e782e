"""The design report card (`reslab assess DESIGN`)."""
