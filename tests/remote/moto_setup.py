#!/usr/bin/env python3
"""Prepares a moto S3 server for tests/remote: an IAM user with an access key allowed s3:*, a bucket,
and the files of a directory uploaded under a prefix, all with that key (so moto checks the
signatures). Prints "ACCESS_KEY SECRET_KEY".

    moto_setup.py ENDPOINT BUCKET PREFIX DIR

The server runs with INITIAL_NO_AUTH_ACTION_COUNT=3: the three IAM calls below go unauthenticated,
every request after them must be signed with a key moto knows (SigV4 checked).
"""
import json
import os
import sys

import boto3

endpoint, bucket, prefix, root = sys.argv[1:5]
anon = dict(endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="setup", aws_secret_access_key="setup")
iam = boto3.client("iam", **anon)
iam.create_user(UserName="sluice-test")
key = iam.create_access_key(UserName="sluice-test")["AccessKey"]
iam.put_user_policy(UserName="sluice-test", PolicyName="s3", PolicyDocument=json.dumps(
    {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                  aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"])
s3.create_bucket(Bucket=bucket)
for dirpath, _, files in os.walk(root):
    for name in files:
        path = os.path.join(dirpath, name)
        rel = os.path.relpath(path, root)
        s3.upload_file(path, bucket, prefix + "/" + rel if prefix else rel)
print(key["AccessKeyId"], key["SecretAccessKey"])
