"""hpdhc: the hyperpod-dhc operator command line (speaks the operator API's JSON; needs boto3 only)."""
