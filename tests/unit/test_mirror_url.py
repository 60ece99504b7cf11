"""The mirror rule (artifacts/README.md) in one place: module_utils/mirror.py, the filter
ai_platform.l1.mirror_url and artifacts/artifacts.py; and the roles that used to copy it as a
regex render the same URLs through the filter as they did before."""

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import jinja2
import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible.plugins.filter.core import regex_replace
from ansible_collections.ai_platform.l1.plugins.filter.mirror_url import FilterModule, mirror_url
from ansible_collections.ai_platform.l1.plugins.module_utils import mirror

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from artifacts import artifacts as lib  # noqa: E402

NV = 'https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/'

FILES = [
    # (url, mirror, bases, expected)
    (NV, '', None, NV),
    (NV, None, None, NV),
    (NV, 'http://10.89.100.1:8080', None, 'http://10.89.100.1:8080/developer.download.nvidia.com/compute/cuda/repos/'
                                          'debian12/x86_64/'),
    # Trailing slashes of the mirror go; the URL's own trailing slash (an APT repository) stays.
    ('https://nvidia.github.io/libnvidia-container/gpgkey', 'https://mirror.dc1.example.com/files//', None,
     'https://mirror.dc1.example.com/files/nvidia.github.io/libnvidia-container/gpgkey'),
    # A mirror with a port and a path; an upstream with a port, a query and userinfo kept as written.
    ('https://dl.example.com:8443/a/b.tgz?x=1', 'http://mirror.local:8080/site/files', None,
     'http://mirror.local:8080/site/files/dl.example.com:8443/a/b.tgz?x=1'),
    ('ftp://user@files.example.com/pub/x.run', 'file:///srv/mirror', None, 'file:///srv/mirror/user@files.example.com/pub/x.run'),
    # Under one of the bases given: the same M/<URL without scheme>.
    ('https://dl.k8s.io/release/v1.34.4/bin/linux/amd64/kubeadm', 'http://10.89.100.1:8080',
     ['https://github.com', 'https://dl.k8s.io/'],
     'http://10.89.100.1:8080/dl.k8s.io/release/v1.34.4/bin/linux/amd64/kubeadm'),
    ('https://dl.k8s.io', 'http://m', ['https://dl.k8s.io'], 'http://m/dl.k8s.io'),
    # Without a mirror nothing is checked or changed.
    ('relative/path', '', ['https://dl.k8s.io'], 'relative/path'),
]

IMAGES = [
    # (reference, mirror, bases, expected)
    ('registry.k8s.io/coredns/coredns:v1.12.1', '10.89.100.1:5000', ['registry.k8s.io'],
     '10.89.100.1:5000/coredns/coredns:v1.12.1'),
    ('registry.k8s.io/pause:3.10', '', ['registry.k8s.io'], 'registry.k8s.io/pause:3.10'),
    # A registry with a port and a path, as the mirror and as a base; the longest base wins.
    ('registry.local:5000/k8s/pause:3.10', 'registry.dc1.example.com:5443/mirror/k8s/',
     ['registry.local:5000', 'registry.local:5000/k8s'], 'registry.dc1.example.com:5443/mirror/k8s/pause:3.10'),
    ('nvcr.io/nvidia/k8s-device-plugin:v0.20.0@sha256:' + 'a' * 64, 'r.example.com/nv', ['nvcr.io/nvidia/'],
     'r.example.com/nv/k8s-device-plugin:v0.20.0@sha256:' + 'a' * 64),
    # The base itself (what artifacts.py redirects: every images base becomes R).
    ('quay.io/calico', '10.0.0.1:5000', ['quay.io/calico'], '10.0.0.1:5000'),
]

REFUSED = [
    # (value, mirror, kind, bases, message)
    ('https://github.com/x/y.tgz', 'http://m', 'files', ['https://dl.k8s.io'],
     "'https://github.com/x/y.tgz' is under none of the files bases (https://dl.k8s.io): the mirror cannot "
     'redirect it'),
    # dl.k8s.io.example.com is not under dl.k8s.io: a base ends at a '/'.
    ('https://dl.k8s.io.example.com/x', 'http://m', 'files', ['https://dl.k8s.io'],
     "'https://dl.k8s.io.example.com/x' is under none of the files bases (https://dl.k8s.io): the mirror cannot "
     'redirect it'),
    ('developer.download.nvidia.com/repo/', 'http://m', 'files', None,
     "'developer.download.nvidia.com/repo/' is not an absolute URL with a host (scheme://host/path): the files "
     'mirror lays files out by upstream host'),
    ('file:///srv/x.run', 'http://m', 'files', None,
     "'file:///srv/x.run' is not an absolute URL with a host (scheme://host/path): the files mirror lays files "
     'out by upstream host'),
    ('docker.io/calico/node:v3.31.3', '10.0.0.1:5000', 'images', ['registry.k8s.io', 'registry.local:5000'],
     "'docker.io/calico/node:v3.31.3' is under none of the images bases (registry.k8s.io, registry.local:5000): "
     'the mirror cannot redirect it'),
    ('registry.local:50001/x:1', '10.0.0.1:5000', 'images', ['registry.local:5000'],
     "'registry.local:50001/x:1' is under none of the images bases (registry.local:5000): the mirror cannot "
     'redirect it'),
    ('registry.k8s.io/pause:3.10', '10.0.0.1:5000', 'images', None,
     "'registry.k8s.io/pause:3.10': an images mirror replaces an images base, and no bases were given"),
    ('registry.k8s.io/pause:3.10', '10.0.0.1:5000', 'charts', None, "kind must be one of files, images, got 'charts'"),
]


@pytest.mark.parametrize(('url', 'mirror_', 'bases', 'expected'), FILES)
def test_files_mirror(url, mirror_, bases, expected):
    assert mirror.files_url(url, mirror_, bases) == expected
    assert mirror_url(url, mirror_, bases=bases) == expected


@pytest.mark.parametrize(('ref', 'mirror_', 'bases', 'expected'), IMAGES)
def test_images_mirror(ref, mirror_, bases, expected):
    assert mirror.image_ref(ref, mirror_, bases) == expected
    assert mirror_url(ref, mirror_, kind='images', bases=bases) == expected


@pytest.mark.parametrize(('value', 'mirror_', 'kind', 'bases', 'message'), REFUSED)
def test_a_value_the_mirror_cannot_redirect_is_refused_by_name(value, mirror_, kind, bases, message):
    with pytest.raises(mirror.MirrorError) as exc:
        mirror.mirror_url(value, mirror_, kind, bases)
    assert str(exc.value) == message
    with pytest.raises(AnsibleFilterError) as exc:
        mirror_url(value, mirror_, kind=kind, bases=bases)
    assert str(exc.value) == f'mirror_url: {message}'


def test_filter_arguments():
    assert FilterModule().filters() == {'mirror_url': mirror_url}
    # One base may be given as a string.
    assert mirror_url('registry.k8s.io/pause:3.10', 'r:5000', kind='images',
                      bases='registry.k8s.io') == 'r:5000/pause:3.10'
    with pytest.raises(AnsibleFilterError, match='bases must be a list of strings'):
        mirror_url('https://a/b', 'http://m', bases=[1])
    with pytest.raises(AnsibleFilterError, match='a files URL must be a string, got int'):
        mirror_url(3, 'http://m')


def test_the_documentation_names_the_filter_and_its_options():
    doc = yaml.safe_load((ROOT / 'collections/ansible_collections/ai_platform/l1/plugins/filter/mirror_url.yml')
                         .read_text())['DOCUMENTATION']
    assert doc['name'] == 'mirror_url'
    assert set(doc['options']) == {'_input', 'mirror', 'kind', 'bases'}
    assert doc['options']['kind']['choices'] == list(mirror.KINDS)
    # ansible-doc loads it as Ansible does (the filter is found through ansible.cfg's collections_path).
    proc = subprocess.run([str(Path(sys.executable).parent / 'ansible-doc'), '-t', 'filter', '--json',
                           'ai_platform.l1.mirror_url'], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, 'ANSIBLE_CONFIG': str(ROOT / 'ansible.cfg')}, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)['ai_platform.l1.mirror_url']['doc']['positional'] == '_input, mirror'


# ---- artifacts.py: the same rule, from the same file

def _old_mirrored_file_base(base, files_mirror):
    """artifacts.py before the rule was shared (kept here to prove the output did not change)."""
    parts = urlsplit(base)
    return files_mirror.rstrip('/') + '/' + (parts.netloc + parts.path).strip('/')


@pytest.mark.parametrize('files_mirror', ['http://10.89.100.1:8080', 'https://mirror.dc1.example.com/files/',
                                          'http://mirror.local:8080/a/b//'])
@pytest.mark.parametrize('images_mirror', ['10.89.100.1:5000', 'registry.dc1.example.com:5443/k8s/'])
def test_artifacts_resolve_the_manifest_as_before(files_mirror, images_mirror):
    manifest = lib.load()
    bases = {**manifest.file_bases, 'ported': 'https://dl.example.com:8443/a/', 'bare': 'http://h'}
    for base in bases.values():
        assert lib.mirrored_file_base(base, files_mirror) == _old_mirrored_file_base(base, files_mirror)
    values = lib.base_values(manifest, files_mirror, images_mirror)
    assert {name: values[name] for name in manifest.image_bases} == {
        name: images_mirror.rstrip('/') for name in manifest.image_bases}
    assert lib.mirror_rule.files_url is not None
    assert Path(lib.mirror_rule.__file__) == Path(mirror.__file__)


def test_a_files_base_with_a_fragment_is_refused():
    # M/<base without scheme> would keep '#x'; the old urlsplit rule dropped it. No base needs one.
    data = yaml.safe_load((ROOT / 'artifacts/manifest.yml').read_text())
    data['bases']['files']['broken'] = 'https://dl.k8s.io/release#x'
    with pytest.raises(lib.ManifestError, match="files base 'broken' must be an http\\(s\\) URL"):
        lib.parse(data)


# ---- the roles: the filter renders exactly what each regex copy rendered

SCHEME = "regex_replace('^[A-Za-z][A-Za-z0-9+.-]*://', '')"
# role variable -> (vars file, the expression it had before, the variables it reads)
OLD = {
    'nvidia_driver__runfile_url': (
        'roles/nvidia_driver/vars/main.yml',
        "{{ (nvidia_driver_files_mirror | regex_replace('/+$', '') ~ '/' ~ (nvidia_driver_runfile_url | trim | "
        + SCHEME + ")) if nvidia_driver_files_mirror else nvidia_driver_runfile_url | trim }}",
        ('nvidia_driver_files_mirror', 'nvidia_driver_runfile_url')),
    # nvidia_driver's and nvidia_container_toolkit's repository and key URLs: the role they share now.
    'vendor_apt_repo__url': (
        'roles/vendor_apt_repo/vars/main.yml',
        "{{ (vendor_apt_repo_files_mirror | regex_replace('/+$', '') ~ '/' ~ (vendor_apt_repo_url | " + SCHEME
        + ")) if vendor_apt_repo_files_mirror else vendor_apt_repo_url }}",
        ('vendor_apt_repo_files_mirror', 'vendor_apt_repo_url')),
    'vendor_apt_repo__key_url': (
        'roles/vendor_apt_repo/vars/main.yml',
        "{{ (vendor_apt_repo_files_mirror | regex_replace('/+$', '') ~ '/' ~ (vendor_apt_repo_key_url | "
        + SCHEME + ")) if vendor_apt_repo_files_mirror else vendor_apt_repo_key_url }}",
        ('vendor_apt_repo_files_mirror', 'vendor_apt_repo_key_url')),
}
# The shared role's URLs have no default: the defaults of the roles that pass them.
PASSED = {
    'vendor_apt_repo_url': [('roles/nvidia_driver/defaults/main.yml', 'nvidia_driver_repo_url'),
                            ('roles/nvidia_container_toolkit/defaults/main.yml', 'nvidia_container_toolkit_repo_url')],
    'vendor_apt_repo_key_url': [('roles/nvidia_driver/defaults/main.yml', 'nvidia_driver_repo_key_url'),
                                ('roles/nvidia_container_toolkit/defaults/main.yml',
                                 'nvidia_container_toolkit_repo_key_url')],
}
MIRRORS = ['', 'http://10.89.100.1:8080', 'http://10.88.0.1:8080/', 'https://mirror.dc1.example.com:8443/files//',
           'file:///srv/mirror']
URLS = [NV, NV + '3bf863cc.pub', 'https://nvidia.github.io/libnvidia-container/stable/deb/amd64/',
        '  https://us.download.nvidia.com/tesla/550.54.15/NVIDIA-Linux-x86_64-550.54.15.run\n',
        'https://files.pythonhosted.org:443/packages/ab/cd/example-1.0-py3-none-any.whl?x=1',
        'ftp://files.example.com/pub/']


def _default_urls(path, url_var):
    """The role's default URL, or the defaults of the roles that pass a shared role's URL."""
    if url_var in PASSED:
        return [yaml.safe_load((ROOT / f).read_text())[name] for f, name in PASSED[url_var]]
    return [yaml.safe_load((ROOT / path.replace('/vars/', '/defaults/')).read_text())[url_var]]


def _render(expression, variables):
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters['regex_replace'] = regex_replace
    env.filters['ai_platform.l1.mirror_url'] = mirror_url
    return env.from_string(expression).render(variables)


@pytest.mark.parametrize('name', sorted(OLD))
def test_roles_render_the_same_urls_through_the_filter(name):
    path, old, (mirror_var, url_var) = OLD[name]
    new = yaml.safe_load((ROOT / path).read_text())[name]
    assert 'ai_platform.l1.mirror_url' in new and 'regex_replace' not in new
    for files_mirror in MIRRORS:
        for url in [*URLS, *_default_urls(path, url_var)]:
            variables = {mirror_var: files_mirror, url_var: url}
            try:
                got = _render(new, variables)
            except AnsibleFilterError:
                # Refused now, where the copy made a broken URL of it (M/  https://...): only a URL with
                # whitespace around it, given to a variable the role does not trim.
                assert files_mirror and url != url.strip() and '| trim' not in new, (name, variables)
                continue
            assert got == _render(old, variables), (name, variables)


def test_no_copy_of_the_rule_is_left_in_roles_or_playbooks():
    copies = [str(p.relative_to(ROOT)) for top in ('roles', 'playbooks') for p in (ROOT / top).rglob('*.y*ml')
              if '[A-Za-z][A-Za-z0-9+.-]*://' in p.read_text()]
    assert copies == []


def test_ansible_renders_the_roles_urls_through_the_filter(tmp_path):
    # The roles' own vars files in a real ansible-playbook (the filter found by its FQCN).
    names = sorted(OLD)
    files = sorted({OLD[name][0] for name in names})
    playbook = tmp_path / 'render.yml'
    playbook.write_text(yaml.safe_dump([{
        'hosts': 'localhost', 'gather_facts': False, 'connection': 'local',
        'vars_files': [str(ROOT / f.replace('/vars/', '/defaults/')) for f in files] + [str(ROOT / f) for f in files],
        'tasks': [{'name': 'render', 'ansible.builtin.debug': {'msg': {n: '{{ %s }}' % n for n in names}}}]}]))
    mirrors = {OLD[name][2][0]: 'http://10.89.100.1:8080/' for name in names}
    passed = {url_var: _default_urls('', url_var)[0] for url_var in PASSED}  # as nvidia_driver passes them
    env = {**os.environ, 'ANSIBLE_CONFIG': str(ROOT / 'ansible.cfg'), 'ANSIBLE_STDOUT_CALLBACK': 'ansible.posix.json',
           'ANSIBLE_CALLBACKS_ENABLED': 'ansible.posix.json', 'ANSIBLE_LOCALHOST_WARNING': '0'}
    proc = subprocess.run([str(Path(sys.executable).parent / 'ansible-playbook'), str(playbook), '-i', 'localhost,',
                           '-e', json.dumps({**mirrors, **passed})], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [result] = json.loads(proc.stdout)['plays'][0]['tasks'][0]['hosts'].values()
    defaults = {}
    for f in files:
        defaults.update(yaml.safe_load((ROOT / f.replace('/vars/', '/defaults/')).read_text()))
    for name in names:
        _path, old, (mirror_var, url_var) = OLD[name]
        # A default may itself be a template (the runfile's).
        url = passed[url_var] if url_var in passed else _render(defaults[url_var], defaults)
        assert result['msg'][name] == _render(old, {mirror_var: mirrors[mirror_var], url_var: url}), name
        assert result['msg'][name].startswith('http://10.89.100.1:8080/'), name
