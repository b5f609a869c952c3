"""What every end-to-end suite stands on: the in-process engine (moto's ASL interpreter, the real handlers,
virtual time), its moto patches and IAM check, the synthesized template and its reader, API Gateway's proxy."""
